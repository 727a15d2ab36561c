// Package objectstore runs the dev cluster's S3-compatible object store: SeaweedFS's weed
// binary (built from its Go module by hack/build-objectstore.sh into bin/objectstore/weed)
// as a child process, so backups and restores are proven against a real server rather than
// a fake of the protocol.
//
// One store is `weed server -s3`: a master, a volume server, a filer and the S3 gateway in
// one process, the smallest mode that serves S3. It binds one address only (the dev Docker
// network's gateway, which is the host's own address on that network), so the host and
// every pod or container on the network reach the same endpoint and nothing listens on
// other interfaces. Access takes one identity whose keys are generated per instance and
// handed to weed through its S3 identity file (mode 0600), never on its command line; its
// data, that file and its log live under the instance's directory.
package objectstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/gomomento/valkey-operator/devcluster/proc"
	"github.com/gomomento/valkey-operator/internal/poll"
)

// DefaultBucket is the bucket a store creates when Config.Bucket is empty.
const DefaultBucket = "dev"

// Region is the region clients sign for; the store accepts any, S3 clients want one.
const Region = "us-east-1"

// PortsNeeded is how many TCP ports one store listens on: the S3 gateway, then the master,
// volume server and filer, each an HTTP and a gRPC port, and the gateway's own gRPC port.
// weed would otherwise put every gRPC port 10000 above its HTTP port, possibly into the
// kernel's ephemeral range; all are set explicitly so one range holds them.
const PortsNeeded = 8

// Config says where and how to run one store.
type Config struct {
	// Bin is the weed binary.
	Bin string
	// Dir holds the store's data, its identity file, its access file, log and pid file.
	Dir string
	// IP is the one address the store binds and announces.
	IP netip.Addr
	// Port is the S3 port; the store's other parts take the next PortsNeeded-1 ports. Zero
	// lets the kernel choose free ports.
	Port int
	// Bucket is created ready; DefaultBucket when empty.
	Bucket string
	// Detach lets the process outlive the caller (`make dev`); a detached store already
	// running from Dir is adopted rather than started again.
	Detach bool
}

// Access is what a client needs to use a store: the content of its env file (see
// WriteEnvFile).
type Access struct {
	// Endpoint is the S3 URL (http://IP:PORT).
	Endpoint  string
	Bucket    string
	AccessKey string
	SecretKey string
}

// Client is a minio-go client for a.
func (a Access) Client() (*minio.Client, error) {
	host, secure, err := a.hostPort()
	if err != nil {
		return nil, err
	}
	// A fixed region spares a bucket-location request before the first signed one.
	return minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(a.AccessKey, a.SecretKey, ""), Secure: secure, Region: Region})
}

func (a Access) hostPort() (string, bool, error) {
	switch {
	case strings.HasPrefix(a.Endpoint, "http://"):
		return strings.TrimPrefix(a.Endpoint, "http://"), false, nil
	case strings.HasPrefix(a.Endpoint, "https://"):
		return strings.TrimPrefix(a.Endpoint, "https://"), true, nil
	}
	return "", false, fmt.Errorf("object store endpoint %q is not an http(s) URL", a.Endpoint)
}

// Store is a running store.
type Store struct {
	Access
	Config Config
	proc   *proc.Process
}

// Paths inside Config.Dir.
func (c Config) dataDir() string      { return filepath.Join(c.Dir, "data") }
func (c Config) identityFile() string { return filepath.Join(c.Dir, "s3-identities.json") }
func (c Config) accessFile() string   { return filepath.Join(c.Dir, "access.env") }
func (c Config) logFile() string      { return filepath.Join(c.Dir, "weed.log") }
func (c Config) pidFile() string      { return filepath.Join(c.Dir, "weed.pid") }
func (c Config) portsFile() string    { return filepath.Join(c.Dir, "ports.json") }

// Start runs the store (or, detached, adopts the one already running from cfg.Dir), waits
// until it accepts a signed write, and creates the bucket.
func Start(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if !cfg.IP.IsValid() {
		return nil, errors.New("object store: no address to bind")
	}
	if _, err := os.Stat(cfg.Bin); err != nil {
		return nil, fmt.Errorf("object store binary missing (run hack/build-objectstore.sh): %w", err)
	}
	if err := os.MkdirAll(cfg.dataDir(), 0o700); err != nil {
		return nil, err
	}
	s := &Store{Config: cfg}
	if cfg.Detach {
		if _, running := proc.Running(cfg.pidFile(), "weed"); running {
			a, err := ReadEnvFile(cfg.accessFile())
			if err != nil {
				return nil, fmt.Errorf("object store running from %s but its access file is unreadable: %w", cfg.Dir, err)
			}
			s.Access = a
			return s, s.waitReady(ctx, 60*time.Second)
		}
	}
	ports, err := choosePorts(cfg.IP, cfg.Port)
	if err != nil {
		return nil, err
	}
	s.Access = Access{
		Endpoint:  "http://" + net.JoinHostPort(cfg.IP.String(), strconv.Itoa(ports[0])),
		Bucket:    cfg.Bucket,
		AccessKey: "dev" + randomHex(8),
		SecretKey: randomHex(20),
	}
	if err := writeIdentities(cfg.identityFile(), s.Access); err != nil {
		return nil, err
	}
	if err := s.Access.WriteEnvFile(cfg.accessFile()); err != nil {
		return nil, err
	}
	b, err := json.Marshal(ports)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfg.portsFile(), b, 0o644); err != nil {
		return nil, err
	}
	s.proc, err = proc.Start("weed", cfg.Bin, args(cfg, ports), cfg.logFile(), cfg.pidFile(), proc.Options{Detach: cfg.Detach, Dir: cfg.Dir})
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, 90*time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// args is weed's command line: addresses, ports and paths only (the keys are in the
// identity file).
func args(cfg Config, p []int) []string {
	ip := cfg.IP.String()
	return []string{
		"server", "-s3",
		"-ip=" + ip, "-ip.bind=" + ip,
		"-dir=" + cfg.dataDir(),
		"-s3.port=" + strconv.Itoa(p[0]), "-s3.port.grpc=" + strconv.Itoa(p[1]),
		"-master.port=" + strconv.Itoa(p[2]), "-master.port.grpc=" + strconv.Itoa(p[3]),
		"-volume.port=" + strconv.Itoa(p[4]), "-volume.port.grpc=" + strconv.Itoa(p[5]),
		"-filer.port=" + strconv.Itoa(p[6]), "-filer.port.grpc=" + strconv.Itoa(p[7]),
		"-s3.config=" + cfg.identityFile(),
		// No Iceberg or Lance catalogs: they would take fixed ports of their own.
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		// This machine sends no traffic out; weed's usage report would try.
		"-master.telemetry=false",
		// A dev store on one disk: small volumes, and no ten-second pause on stop.
		"-master.volumeSizeLimitMB=256", "-volume.preStopSeconds=0",
		// Only the identity file's keys work: no bucket appears by accident.
		"-s3.autoCreateBucket=false",
	}
}

// waitReady polls until the store answers a signed request, creates the bucket unless it
// exists, and then until a small object can be written and removed: the S3 port answers
// before the filer has a volume to write to.
func (s *Store) waitReady(ctx context.Context, timeout time.Duration) error {
	cl, err := s.Client()
	if err != nil {
		return err
	}
	probe := ".objectstore-ready-" + randomHex(4)
	err = poll.Until(ctx, 250*time.Millisecond, timeout, "object store ready at "+s.Endpoint, func(ctx context.Context) (bool, string, error) {
		if s.proc != nil {
			select {
			case <-s.proc.Exited():
				return false, "", s.proc.ExitError()
			default:
			}
		}
		exists, err := cl.BucketExists(ctx, s.Bucket)
		if err != nil {
			return false, "bucket exists: " + err.Error(), nil
		}
		if !exists {
			if err := cl.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{}); err != nil {
				return false, "make bucket: " + err.Error(), nil
			}
		}
		if _, err := cl.PutObject(ctx, s.Bucket, probe, strings.NewReader("ok"), 2, minio.PutObjectOptions{}); err != nil {
			return false, "probe write: " + err.Error(), nil
		}
		if err := cl.RemoveObject(ctx, s.Bucket, probe, minio.RemoveObjectOptions{}); err != nil {
			return false, "probe delete: " + err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("%w; log tail:\n%s", err, proc.Tail(s.Config.logFile(), 15))
	}
	return nil
}

// stopGrace is how long a stopping store gets after SIGTERM before SIGKILL. weed stops its
// embedded volume server before its filer, whose last metadata flush then retries against
// the stopped volume server for about 15 s; the S3 gateway and the volume server are down
// well within this grace, and a dev store's data is removed with its cluster anyway.
const stopGrace = 2 * time.Second

// Stop ends a store this Store started (not an adopted one: see StopDetached).
func (s *Store) Stop() {
	if s.proc != nil {
		s.proc.Stop(stopGrace)
		s.proc = nil
		removeSockets(s.Config)
	}
}

// StopDetached stops the store recorded in dir's pid file, for `devcluster down` run from
// another process. It is safe to call when none runs.
func StopDetached(dir string) error {
	cfg := Config{Dir: dir}
	err := proc.StopPidFile(cfg.pidFile(), "weed", stopGrace)
	removeSockets(cfg)
	return err
}

// removeSockets removes the Unix sockets weed makes in /tmp for the gRPC ports of the store
// in cfg.Dir (named by port, whatever -dir says): a store stopped by SIGKILL leaves them.
func removeSockets(cfg Config) {
	b, err := os.ReadFile(cfg.portsFile())
	if err != nil {
		return
	}
	var ports []int
	if json.Unmarshal(b, &ports) != nil {
		return
	}
	for _, p := range ports {
		for _, part := range []string{"master", "volume", "filer", "s3"} {
			path := fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", part, p) // weed fixes /tmp
			if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
				_ = os.Remove(path)
			}
		}
	}
}

// identities is the part of weed's S3 identity file this package writes: one identity with
// every action on every bucket.
type identities struct {
	Identities []identity `json:"identities"`
}

type identity struct {
	Name        string       `json:"name"`
	Credentials []credential `json:"credentials"`
	Actions     []string     `json:"actions"`
}

type credential struct {
	AccessKey string `json:"accessKey"`
	SecretKey string `json:"secretKey"`
}

func writeIdentities(path string, a Access) error {
	b, err := json.MarshalIndent(identities{Identities: []identity{{
		Name:        "dev",
		Credentials: []credential{{AccessKey: a.AccessKey, SecretKey: a.SecretKey}},
		Actions:     []string{"Admin", "Read", "Write", "List", "Tagging"},
	}}}, "", "  ")
	if err != nil {
		return err
	}
	return writePrivate(path, b)
}

// writePrivate writes a file only its owner may read, replacing any earlier one whole.
func writePrivate(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // an older tmp file keeps its mode
		return err
	}
	return os.Rename(tmp, path)
}

// choosePorts returns PortsNeeded ports on ip: base and the ones after it, or, for base 0,
// ports the kernel hands out, all held open together so none is handed out twice.
func choosePorts(ip netip.Addr, base int) ([]int, error) {
	ports := make([]int, PortsNeeded)
	if base != 0 {
		for i := range ports {
			ports[i] = base + i
		}
		return ports, nil
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		if err != nil {
			return nil, fmt.Errorf("object store: choose a free port on %s: %w", ip, err)
		}
		held = append(held, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// BinPath is where hack/build-objectstore.sh puts weed under the repository root.
func BinPath(root string) string { return filepath.Join(root, "bin", "objectstore", "weed") }

// FindBin looks for BinPath in the working directory and its parents, then in this source
// file's, for callers that do not know the repository root (the integration harness).
func FindBin() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(BinPath(d)); err == nil {
				return BinPath(d), nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("bin/objectstore/weed not found in any parent directory (run make objectstore)")
}
