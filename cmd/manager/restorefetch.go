package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gomomento/valkey-operator/objectstore"
	"github.com/gomomento/valkey-operator/valkeyops/snapshot"
)

// restoreFetchCommand is the subcommand a restoring primary's init container runs: it places
// its shard's backed-up RDB in the data directory before the server starts (see
// snapshot.Fetch), configured by the env of snapshot.EnvRestore*.
const restoreFetchCommand = "restore-fetch"

// Exit codes of restore-fetch, which the operator reads from the init container's status.
const (
	exitFetched = 0
	// exitTransient: the network or the store failed; another try may succeed (the pod is
	// replaced).
	exitTransient = 1
	// exitRefused: the object is not the manifest's, is missing, cannot be loaded by this
	// Valkey, or the container was configured wrongly; trying again cannot help.
	exitRefused = 2
)

// errEnv is a missing or unreadable variable of restore-fetch's env: the operator rendered
// the container wrongly, which no retry mends.
var errEnv = errors.New("restore-fetch environment")

// restoreFetchConfig is restore-fetch's env, parsed.
type restoreFetchConfig struct {
	Location       objectstore.Location
	Wanted         snapshot.Wanted
	TerminationLog string
}

// parseRestoreFetchEnv reads the env through getenv and the CA file through readFile. Its
// errors name variables, never their values when they may be secret.
func parseRestoreFetchEnv(getenv func(string) string, readFile func(string) ([]byte, error)) (restoreFetchConfig, error) {
	cfg := restoreFetchConfig{TerminationLog: getenv(snapshot.EnvRestoreTerminationLog)}
	if cfg.TerminationLog == "" {
		cfg.TerminationLog = snapshot.DefaultTerminationLog
	}
	var missing []string
	need := func(name string) string {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	var bad []string
	number := func(name string) int64 {
		v := need(name)
		if v == "" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			bad = append(bad, fmt.Sprintf("%s=%q is not a count", name, v))
		}
		return n
	}
	cfg.Location = objectstore.Location{
		Endpoint:  need(snapshot.EnvRestoreEndpoint),
		Bucket:    need(snapshot.EnvRestoreBucket),
		Region:    strings.TrimSpace(getenv(snapshot.EnvRestoreRegion)),
		AccessKey: need(snapshot.EnvRestoreAccessKey),
		SecretKey: need(snapshot.EnvRestoreSecretKey),
		// The object key is the manifest's, in full: no prefix is added.
	}
	cfg.Wanted = snapshot.Wanted{
		Object:        need(snapshot.EnvRestoreObject),
		SHA256:        need(snapshot.EnvRestoreSHA256),
		Bytes:         number(snapshot.EnvRestoreBytes),
		RDBVersion:    int(number(snapshot.EnvRestoreRDBVersion)),
		MaxRDBVersion: int(number(snapshot.EnvRestoreMaxRDBVersion)),
		ValkeyVersion: need(snapshot.EnvRestoreValkeyVersion),
		Shard:         int(number(snapshot.EnvRestoreShard)),
		Dir:           need(snapshot.EnvRestoreDir),
	}
	// The AOF's names come together, from a node whose server keeps an AOF, or not at all.
	aofDir, aofFile := strings.TrimSpace(getenv(snapshot.EnvRestoreAOFDir)), strings.TrimSpace(getenv(snapshot.EnvRestoreAOFFile))
	if aofDir != "" || aofFile != "" {
		cfg.Wanted.AOF = &snapshot.AOFLayout{Dir: need(snapshot.EnvRestoreAOFDir), File: need(snapshot.EnvRestoreAOFFile)}
	}
	if len(missing) > 0 {
		return cfg, fmt.Errorf("%w: %s not set", errEnv, strings.Join(missing, ", "))
	}
	if len(bad) > 0 {
		return cfg, fmt.Errorf("%w: %s", errEnv, strings.Join(bad, "; "))
	}
	if path := strings.TrimSpace(getenv(snapshot.EnvRestoreCAFile)); path != "" {
		ca, err := readFile(path)
		if err != nil {
			return cfg, fmt.Errorf("%w: %s: %v", errEnv, snapshot.EnvRestoreCAFile, err)
		}
		cfg.Location.CA = ca
	}
	return cfg, nil
}

// restoreFetchExitCode maps restore-fetch's outcome to its exit code.
func restoreFetchExitCode(err error) int {
	switch {
	case err == nil:
		return exitFetched
	case snapshot.Refused(err), errors.Is(err, errEnv):
		return exitRefused
	}
	return exitTransient
}

// restoreFetchMain runs restore-fetch in this process and returns its exit code.
func restoreFetchMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return restoreFetch(ctx, os.Getenv, os.ReadFile, os.Stdout, os.Stderr)
}

// restoreFetch fetches the shard the env names. On failure it writes one line to stderr and
// to the termination message file, which the operator reads.
func restoreFetch(ctx context.Context, getenv func(string) string, readFile func(string) ([]byte, error), stdout, stderr io.Writer) int {
	start := time.Now()
	cfg, err := parseRestoreFetchEnv(getenv, readFile)
	if err == nil {
		var got snapshot.Fetched
		got, err = fetchShard(ctx, cfg)
		if err == nil {
			switch {
			case got.Started:
				fmt.Fprintf(stdout, "shard %d: %s holds nodes.conf: the server has already started on it, nothing fetched\n", cfg.Wanted.Shard, cfg.Wanted.Dir)
			case got.AlreadyThere:
				fmt.Fprintf(stdout, "shard %d: %s already holds the backup's snapshot (%d bytes, SHA-256 verified)\n", cfg.Wanted.Shard, got.Path, got.Bytes)
			default:
				fmt.Fprintf(stdout, "shard %d: %s placed: %d bytes, SHA-256 verified, RDB version %d, %d keys, in %s\n",
					cfg.Wanted.Shard, got.Path, got.Bytes, got.Header.Version, got.Header.Keys, time.Since(start).Round(time.Millisecond))
			}
			if got.Manifest != "" && !got.Started {
				fmt.Fprintf(stdout, "shard %d: %s names it as the AOF's base\n", cfg.Wanted.Shard, got.Manifest)
			}
		}
	}
	code := restoreFetchExitCode(err)
	if err != nil {
		line := oneLine(err.Error())
		fmt.Fprintln(stderr, "restore-fetch:", line)
		if werr := os.WriteFile(cfg.TerminationLog, []byte(line), 0o644); werr != nil {
			fmt.Fprintf(stderr, "restore-fetch: writing the termination message to %s: %v\n", cfg.TerminationLog, werr)
		}
	}
	return code
}

func fetchShard(ctx context.Context, cfg restoreFetchConfig) (snapshot.Fetched, error) {
	store, err := objectstore.Open(cfg.Location)
	if err != nil {
		return snapshot.Fetched{}, fmt.Errorf("%w: %v", errEnv, err)
	}
	return snapshot.Fetch(ctx, store, cfg.Wanted)
}

// terminationMessageMax is what Kubernetes keeps of a termination message.
const terminationMessageMax = 4096

// oneLine is msg on one line, within what a termination message keeps.
func oneLine(msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > terminationMessageMax {
		msg = msg[:terminationMessageMax-3] + "..."
	}
	return msg
}
