package objectstore

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// The env file's keys, one KEY=value line each: a shell can source it and other tools read
// it as a dotenv file.
const (
	envEndpoint  = "ENDPOINT"
	envBucket    = "BUCKET"
	envAccessKey = "ACCESS_KEY"
	envSecretKey = "SECRET_KEY"
)

// WriteEnvFile writes a to path as ENDPOINT=, BUCKET=, ACCESS_KEY= and SECRET_KEY= lines,
// readable by its owner only (it holds the secret key).
func (a Access) WriteEnvFile(path string) error {
	var b bytes.Buffer
	for _, kv := range [][2]string{{envEndpoint, a.Endpoint}, {envBucket, a.Bucket}, {envAccessKey, a.AccessKey}, {envSecretKey, a.SecretKey}} {
		fmt.Fprintf(&b, "%s=%s\n", kv[0], kv[1])
	}
	return writePrivate(path, b.Bytes())
}

// ReadEnvFile reads an Access written by WriteEnvFile; every key must be there.
func ReadEnvFile(path string) (Access, error) {
	f, err := os.Open(path)
	if err != nil {
		return Access{}, err
	}
	defer f.Close()
	vals := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vals[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return Access{}, err
	}
	for _, k := range []string{envEndpoint, envBucket, envAccessKey, envSecretKey} {
		if vals[k] == "" {
			return Access{}, &MissingKeyError{Path: path, Key: k}
		}
	}
	return Access{Endpoint: vals[envEndpoint], Bucket: vals[envBucket], AccessKey: vals[envAccessKey], SecretKey: vals[envSecretKey]}, nil
}

// MissingKeyError is an env file without one of the keys an Access needs.
type MissingKeyError struct{ Path, Key string }

func (e *MissingKeyError) Error() string { return fmt.Sprintf("%s: no %s", e.Path, e.Key) }
