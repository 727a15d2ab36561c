package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/objectstore"
	"github.com/gomomento/valkey-operator/valkeyops/snapshot"
)

const (
	testAccessKey = "AKIA-access-key-value"
	testSecretKey = "secret-key-value-never-shown"
	testSHA256    = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
)

// restoreEnv is a complete restore-fetch env with changes applied ("" removes a variable).
func restoreEnv(changes map[string]string) func(string) string {
	env := map[string]string{
		snapshot.EnvRestoreEndpoint:      "http://127.0.0.1:1",
		snapshot.EnvRestoreBucket:        "backups",
		snapshot.EnvRestoreObject:        "prod/ns/c/b/shard-1.rdb",
		snapshot.EnvRestoreSHA256:        testSHA256,
		snapshot.EnvRestoreBytes:         "431021734",
		snapshot.EnvRestoreRDBVersion:    "11",
		snapshot.EnvRestoreMaxRDBVersion: "80",
		snapshot.EnvRestoreValkeyVersion: "9.1.2",
		snapshot.EnvRestoreShard:         "1",
		snapshot.EnvRestoreAccessKey:     testAccessKey,
		snapshot.EnvRestoreSecretKey:     testSecretKey,
		snapshot.EnvRestoreDir:           "/data",
	}
	for k, v := range changes {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	return func(k string) string { return env[k] }
}

func TestParseRestoreFetchEnv(t *testing.T) {
	readFile := func(path string) ([]byte, error) {
		if path == "/etc/restore-ca/ca.crt" {
			return []byte("PEM"), nil
		}
		return nil, fmt.Errorf("open %s: %w", path, os.ErrNotExist)
	}
	t.Run("complete", func(t *testing.T) {
		cfg, err := parseRestoreFetchEnv(restoreEnv(map[string]string{
			snapshot.EnvRestoreRegion: "eu-west-1", snapshot.EnvRestoreCAFile: "/etc/restore-ca/ca.crt",
		}), readFile)
		require.NoError(t, err)
		assert.Equal(t, objectstore.Location{Endpoint: "http://127.0.0.1:1", Bucket: "backups", Region: "eu-west-1",
			AccessKey: testAccessKey, SecretKey: testSecretKey, CA: []byte("PEM")}, cfg.Location, "no prefix: the object key is full")
		assert.Equal(t, snapshot.Wanted{Shard: 1, Object: "prod/ns/c/b/shard-1.rdb", SHA256: testSHA256, Bytes: 431021734,
			RDBVersion: 11, MaxRDBVersion: 80, ValkeyVersion: "9.1.2", Dir: "/data"}, cfg.Wanted)
		assert.Equal(t, "/dev/termination-log", cfg.TerminationLog)
	})
	t.Run("optional ones absent", func(t *testing.T) {
		cfg, err := parseRestoreFetchEnv(restoreEnv(map[string]string{snapshot.EnvRestoreTerminationLog: "/tmp/term"}), readFile)
		require.NoError(t, err)
		assert.Empty(t, cfg.Location.Region)
		assert.Nil(t, cfg.Location.CA)
		assert.Equal(t, "/tmp/term", cfg.TerminationLog)
		assert.Nil(t, cfg.Wanted.AOF, "no AOF variables: dump.rdb")
	})
	t.Run("AOF layout", func(t *testing.T) {
		cfg, err := parseRestoreFetchEnv(restoreEnv(map[string]string{
			snapshot.EnvRestoreAOFDir: "appendonlydir", snapshot.EnvRestoreAOFFile: "appendonly.aof",
		}), readFile)
		require.NoError(t, err)
		assert.Equal(t, &snapshot.AOFLayout{Dir: "appendonlydir", File: "appendonly.aof"}, cfg.Wanted.AOF)
	})
	for _, tc := range []struct {
		name    string
		changes map[string]string
		message string
	}{
		{"missing", map[string]string{snapshot.EnvRestoreSecretKey: "", snapshot.EnvRestoreDir: ""},
			"restore-fetch environment: VALKEY_RESTORE_SECRET_KEY, VALKEY_RESTORE_DIR not set"},
		{"not a number", map[string]string{snapshot.EnvRestoreBytes: "12k", snapshot.EnvRestoreShard: "-1"},
			`restore-fetch environment: VALKEY_RESTORE_BYTES="12k" is not a count; VALKEY_RESTORE_SHARD="-1" is not a count`},
		{"AOF file without its directory", map[string]string{snapshot.EnvRestoreAOFFile: "appendonly.aof"},
			"restore-fetch environment: VALKEY_RESTORE_AOF_DIR not set"},
		{"AOF directory without its file", map[string]string{snapshot.EnvRestoreAOFDir: "appendonlydir"},
			"restore-fetch environment: VALKEY_RESTORE_AOF_FILE not set"},
		{"CA file unreadable", map[string]string{snapshot.EnvRestoreCAFile: "/nowhere/ca.crt"},
			"restore-fetch environment: VALKEY_RESTORE_CA_FILE: open /nowhere/ca.crt: file does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseRestoreFetchEnv(restoreEnv(tc.changes), readFile)
			require.ErrorIs(t, err, errEnv)
			assert.Equal(t, tc.message, err.Error())
			assert.Equal(t, exitRefused, restoreFetchExitCode(err))
		})
	}
}

func TestRestoreFetchExitCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"fetched", nil, 0},
		{"refused", fmt.Errorf("wrapped: %w", &snapshot.RefusedError{Reason: snapshot.ErrChecksum}), 2},
		{"bad env", fmt.Errorf("%w: x not set", errEnv), 2},
		{"unreachable", fmt.Errorf("get: %w", objectstore.ErrUnreachable), 1},
		{"anything else", errors.New("connection reset"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, restoreFetchExitCode(tc.err)) })
	}
}

// TestRestoreFetchFailureReport: a failure is one line on stderr and in the termination
// message file, with the exit code of its kind, and no credential anywhere. These fail
// before any byte is downloaded (the integration test fetches for real).
func TestRestoreFetchFailureReport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		changes map[string]string
		code    int
		message string
	}{
		{"too new for the image", map[string]string{snapshot.EnvRestoreRDBVersion: "80", snapshot.EnvRestoreMaxRDBVersion: "11", snapshot.EnvRestoreValkeyVersion: "8.0.1"},
			2, "shard 1: the backup's RDB version 80 is newer than Valkey 8.0.1 loads (11)"},
		{"env incomplete", map[string]string{snapshot.EnvRestoreEndpoint: ""},
			2, "restore-fetch environment: VALKEY_RESTORE_ENDPOINT not set"},
		{"endpoint not a URL", map[string]string{snapshot.EnvRestoreEndpoint: "s3.example.com"},
			2, `restore-fetch environment: object store endpoint "s3.example.com" is not an http(s) URL`},
		{"store unreachable", nil, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			term := filepath.Join(dir, "termination-log")
			tc.changes = mergeEnv(tc.changes, map[string]string{snapshot.EnvRestoreTerminationLog: term, snapshot.EnvRestoreDir: dir})
			var stdout, stderr bytes.Buffer
			code := restoreFetch(context.Background(), restoreEnv(tc.changes), os.ReadFile, &stdout, &stderr)
			assert.Equal(t, tc.code, code)
			msg, err := os.ReadFile(term)
			require.NoError(t, err)
			if tc.message != "" {
				assert.Equal(t, tc.message, string(msg))
			} else {
				assert.Contains(t, string(msg), "shard 1: opening the object prod/ns/c/b/shard-1.rdb")
				assert.Contains(t, string(msg), objectstore.ErrUnreachable.Error())
			}
			assert.Equal(t, "restore-fetch: "+string(msg)+"\n", stderr.String())
			assert.Empty(t, stdout.String())
			assert.NotContains(t, string(msg), "\n")
			for _, secret := range []string{testAccessKey, testSecretKey} {
				assert.NotContains(t, stderr.String()+string(msg), secret)
			}
			_, err = os.Stat(filepath.Join(dir, snapshot.DumpFile))
			assert.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}

func mergeEnv(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]string{a, b} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestOneLine(t *testing.T) {
	assert.Equal(t, "a b c", oneLine("a\nb\r\n  c\n"))
	assert.Len(t, oneLine(strings.Repeat("x", 5000)), terminationMessageMax)
}
