// Package harness starts real Valkey containers on a user-defined Docker network through
// testcontainers-go, for the integration tests and the benchmark. No Kubernetes is involved:
// each container is one Valkey node reachable from the host at its bridge IP.
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/gomomento/valkey-operator/devcluster/objectstore"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

func init() {
	// Ryuk's image cannot be pulled here; every container and network is removed explicitly.
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	if os.Getenv("HARNESS_VERBOSE") == "" {
		tclog.SetDefault(tclog.NewNoopLogger())
	}
}

// Image is the Valkey 8.0 image (VALKEY_IMAGE, default valkey-operator/valkey:8.0).
func Image() string { return envOr("VALKEY_IMAGE", "valkey-operator/valkey:8.0") }

// Image9 is the Valkey 9.x image (VALKEY9_IMAGE, default valkey-operator/valkey:9.1).
func Image9() string { return envOr("VALKEY9_IMAGE", "valkey-operator/valkey:9.1") }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// DockerProblem returns why Docker cannot be used (nil when it can), so tests can skip with a
// clear message instead of failing on machines without Docker.
func DockerProblem(images ...string) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("docker CLI not found: %w", err)
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Errorf("docker engine not reachable: %v: %s", err, bytes.TrimSpace(out))
	}
	for _, img := range images {
		if err := exec.Command("docker", "image", "inspect", img).Run(); err != nil {
			return fmt.Errorf("image %s missing: run hack/valkey-image/build.sh (make valkey-image)", img)
		}
	}
	return nil
}

// TLSFiles are PEM files mounted at /etc/valkey/tls/{ca.crt,tls.crt,tls.key}.
type TLSFiles struct{ CA, Cert, Key []byte }

// Config of the nodes of one Env; every node of an Env is started the same way.
type Config struct {
	Image string
	ACL   model.ACLSpec // rendered into /etc/valkey/acl/users.acl; passwords required
	TLS   *TLSFiles     // nil = plaintext; else TLS-only (client, replication, bus)
	Args  []string      // extra valkey-server arguments
	// Volumes keeps each node's /data (nodes.conf, AOF, RDB) on a Docker volume of its own
	// instead of a tmpfs, so Restart brings the node back with its identity and data.
	Volumes bool
}

// Env is one Docker network with Valkey nodes on it.
type Env struct {
	cfg     Config
	Network *testcontainers.DockerNetwork

	mu         sync.Mutex
	seq        int
	containers map[string]*testcontainers.DockerContainer
	nodes      []model.Node
	volumes    []string
}

// New creates the network. Close removes it and every container.
func New(ctx context.Context, cfg Config) (*Env, error) {
	if cfg.Image == "" {
		cfg.Image = Image()
	}
	nw, err := network.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("create network: %w", err)
	}
	return &Env{cfg: cfg, Network: nw, containers: map[string]*testcontainers.DockerContainer{}}, nil
}

// NodeTimeoutMillis is every node's cluster-node-timeout, as the operator renders it.
const NodeTimeoutMillis = 3000

// Args is the valkey-server command line every node runs.
func (e *Env) Args() []string {
	args := []string{"valkey-server",
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(NodeTimeoutMillis),
		"--aclfile", "/etc/valkey/acl/users.acl",
		"--save", "", "--appendonly", "no",
		"--repl-diskless-sync-delay", "0",
	}
	if e.cfg.TLS != nil {
		args = append(args, "--port", "0", "--tls-port", "6379",
			"--tls-cluster", "yes", "--tls-replication", "yes",
			"--tls-cert-file", "/etc/valkey/tls/tls.crt",
			"--tls-key-file", "/etc/valkey/tls/tls.key",
			"--tls-ca-cert-file", "/etc/valkey/tls/ca.crt",
			"--tls-auth-clients", "optional")
	} else {
		args = append(args, "--port", "6379")
	}
	return append(args, e.cfg.Args...)
}

// StartNodes starts shards*perShard nodes in parallel; node i belongs to shard i/perShard.
func (e *Env) StartNodes(ctx context.Context, shards, perShard int) ([]model.Node, error) {
	out := make([]model.Node, shards*perShard)
	errs := make([]error, len(out))
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = e.StartNode(ctx, i/perShard)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// StartNode starts one node for shard and returns it (Addr = bridge IP:6379).
func (e *Env) StartNode(ctx context.Context, shard int) (model.Node, error) {
	e.mu.Lock()
	name := fmt.Sprintf("n%d", e.seq)
	e.seq++
	e.mu.Unlock()
	n, err := e.start(ctx, name, shard, "")
	if err != nil {
		return n, err
	}
	e.mu.Lock()
	e.nodes = append(e.nodes, n)
	e.mu.Unlock()
	return n, nil
}

// volumeOf is the Docker volume holding node name's /data (Config.Volumes).
func (e *Env) volumeOf(name string) string { return e.Network.Name + "-" + name }

// Restart stops node name's container gracefully (SIGTERM: the server fsyncs its AOF) and
// starts a new container in its place on the same volume (Config.Volumes), as the operator
// restarts a durable node's pod. The new container gets an address of its own, which the
// returned node carries; every node started after it keeps the address it had.
func (e *Env) Restart(ctx context.Context, name string) (model.Node, error) {
	if err := e.Stop(ctx, name); err != nil {
		return model.Node{}, err
	}
	return e.StartAgain(ctx, name)
}

// Stop stops and removes node name's container gracefully; its volume stays.
func (e *Env) Stop(ctx context.Context, name string) error {
	e.mu.Lock()
	c := e.containers[name]
	delete(e.containers, name)
	e.mu.Unlock()
	if c == nil {
		return fmt.Errorf("no container for %s", name)
	}
	return c.Terminate(ctx)
}

// Occupy starts count idle containers on the network, taking the addresses Docker would hand
// out next (it reuses freed ones at once): nodes started after it get addresses no node had
// before, as pods restarted on their volumes do. Close removes them.
func (e *Env) Occupy(ctx context.Context, count int) error {
	for i := range count {
		c, err := testcontainers.Run(ctx, e.cfg.Image,
			testcontainers.WithCmd("valkey-server", "--port", "7777", "--save", "", "--appendonly", "no"),
			network.WithNetwork(nil, e.Network),
			testcontainers.WithConfigModifier(func(c *container.Config) { c.User = "999:999" }),
			testcontainers.WithWaitStrategy(wait.ForLog("Ready to accept connections").WithStartupTimeout(30*time.Second)),
		)
		if c != nil {
			e.mu.Lock()
			e.containers[fmt.Sprintf("placeholder-%d-%d", len(e.containers), i)] = c
			e.mu.Unlock()
		}
		if err != nil {
			return fmt.Errorf("start placeholder: %w", err)
		}
	}
	return nil
}

// StartAgain starts a new container for node name (stopped with Stop) on its volume.
func (e *Env) StartAgain(ctx context.Context, name string) (model.Node, error) {
	e.mu.Lock()
	i := slices.IndexFunc(e.nodes, func(n model.Node) bool { return n.Name == name })
	e.mu.Unlock()
	if i < 0 {
		return model.Node{}, fmt.Errorf("no node %s", name)
	}
	n, err := e.start(ctx, name, e.nodes[i].Shard, "")
	if err != nil {
		return n, err
	}
	e.mu.Lock()
	e.nodes[i] = n
	e.mu.Unlock()
	return n, nil
}

// StartNodeOnDir starts one node for shard whose /data is dataDir, a directory of the host
// (bind-mounted; the server runs as 999:999 and must be able to write there), as a pod's
// server starts on the data directory its init container prepared. args follow the Env's
// (Args), so a directive given there again takes their value (valkey-server keeps the last),
// as a node whose configuration differs from the Env's. Restart and StartAgain do not apply
// to it.
func (e *Env) StartNodeOnDir(ctx context.Context, shard int, dataDir string, args ...string) (model.Node, error) {
	e.mu.Lock()
	name := fmt.Sprintf("n%d", e.seq)
	e.seq++
	e.mu.Unlock()
	n, err := e.start(ctx, name, shard, dataDir, args...)
	if err != nil {
		return n, err
	}
	e.mu.Lock()
	e.nodes = append(e.nodes, n)
	e.mu.Unlock()
	return n, nil
}

// start runs node name's container and returns the node at its address; its /data is
// dataDir on the host when given, else its volume (Config.Volumes) or a tmpfs; args follow
// the Env's.
func (e *Env) start(ctx context.Context, name string, shard int, dataDir string, args ...string) (model.Node, error) {
	files := []testcontainers.ContainerFile{{
		Reader: bytes.NewReader([]byte(model.RenderACL(e.cfg.ACL))), ContainerFilePath: "/etc/valkey/acl/users.acl", FileMode: 0o644,
	}}
	if t := e.cfg.TLS; t != nil {
		files = append(files,
			testcontainers.ContainerFile{Reader: bytes.NewReader(t.CA), ContainerFilePath: "/etc/valkey/tls/ca.crt", FileMode: 0o644},
			testcontainers.ContainerFile{Reader: bytes.NewReader(t.Cert), ContainerFilePath: "/etc/valkey/tls/tls.crt", FileMode: 0o644},
			testcontainers.ContainerFile{Reader: bytes.NewReader(t.Key), ContainerFilePath: "/etc/valkey/tls/tls.key", FileMode: 0o644})
	}
	data := testcontainers.WithTmpfs(map[string]string{"/data": "rw,uid=999,gid=999"})
	if e.cfg.Volumes {
		vol := e.volumeOf(name)
		e.mu.Lock()
		if !slices.Contains(e.volumes, vol) {
			e.volumes = append(e.volumes, vol)
		}
		e.mu.Unlock()
		data = testcontainers.WithMounts(testcontainers.ContainerMount{Source: testcontainers.GenericVolumeMountSource{Name: vol}, Target: "/data"})
	}
	if dataDir != "" {
		data = testcontainers.WithHostConfigModifier(func(h *container.HostConfig) { h.Binds = append(h.Binds, dataDir+":/data") })
	}
	c, err := testcontainers.Run(ctx, e.cfg.Image,
		testcontainers.WithCmd(append(e.Args(), args...)...),
		network.WithNetwork(nil, e.Network),
		testcontainers.WithFiles(files...),
		testcontainers.WithConfigModifier(func(c *container.Config) { c.User = "999:999" }),
		data,
		testcontainers.WithWaitStrategy(wait.ForLog("Ready to accept connections").WithStartupTimeout(60*time.Second)),
	)
	if c != nil {
		e.mu.Lock()
		e.containers[name] = c
		e.mu.Unlock()
	}
	if err != nil {
		return model.Node{}, fmt.Errorf("start %s: %w", name, err)
	}
	ip, err := c.ContainerIP(ctx)
	if err != nil {
		return model.Node{}, fmt.Errorf("ip of %s: %w", name, err)
	}
	return model.Node{Name: name, Addr: net.JoinHostPort(ip, "6379"), Shard: shard, NodeTimeoutMillis: NodeTimeoutMillis}, nil
}

// StartSidecar starts cmd from the Env's image in node name's network namespace, as a second
// container of a pod shares its first one's: it reaches the node on localhost, and the host
// reaches it at the node's IP. files are written into it first (path to content, mode 0644);
// it runs as 999:999 and counts as started once its output shows ready. Close removes it.
func (e *Env) StartSidecar(ctx context.Context, name string, cmd []string, files map[string][]byte, ready string) (*testcontainers.DockerContainer, error) {
	node := e.Container(name)
	if node == nil {
		return nil, fmt.Errorf("no container for %s", name)
	}
	var cf []testcontainers.ContainerFile
	for path, b := range files {
		cf = append(cf, testcontainers.ContainerFile{Reader: bytes.NewReader(b), ContainerFilePath: path, FileMode: 0o644})
	}
	c, err := testcontainers.Run(ctx, e.cfg.Image,
		testcontainers.WithCmd(cmd...),
		testcontainers.WithFiles(cf...),
		testcontainers.WithConfigModifier(func(c *container.Config) { c.User = "999:999" }),
		testcontainers.WithHostConfigModifier(func(h *container.HostConfig) {
			h.NetworkMode = container.NetworkMode("container:" + node.GetContainerID())
		}),
		testcontainers.WithWaitStrategy(wait.ForLog(ready).WithStartupTimeout(30*time.Second)),
	)
	if c != nil {
		e.mu.Lock()
		e.containers[fmt.Sprintf("%s/sidecar-%d", name, len(e.containers))] = c
		e.mu.Unlock()
	}
	if err != nil {
		return c, fmt.Errorf("start sidecar of %s: %w", name, err)
	}
	return c, nil
}

// Container returns the container of node name.
func (e *Env) Container(name string) *testcontainers.DockerContainer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.containers[name]
}

// Kill sends SIGKILL to node name's container: no graceful shutdown, no shutdown failover.
func (e *Env) Kill(ctx context.Context, name string) error {
	c := e.Container(name)
	if c == nil {
		return fmt.Errorf("no container for %s", name)
	}
	if out, err := exec.CommandContext(ctx, "docker", "kill", "--signal", "KILL", c.GetContainerID()).CombinedOutput(); err != nil {
		return fmt.Errorf("kill %s: %v: %s", name, err, out)
	}
	return nil
}

// WriteFile replaces a file inside node name's container (e.g. a rotated certificate).
func (e *Env) WriteFile(ctx context.Context, name, path string, data []byte) error {
	c := e.Container(name)
	if c == nil {
		return fmt.Errorf("no container for %s", name)
	}
	return c.CopyToContainer(ctx, data, path, 0o644)
}

// Exec runs a command in node name's container and returns its exit code and output.
func (e *Env) Exec(ctx context.Context, name string, cmd ...string) (int, string, error) {
	c := e.Container(name)
	if c == nil {
		return -1, "", fmt.Errorf("no container for %s", name)
	}
	code, r, err := c.Exec(ctx, cmd)
	if err != nil {
		return code, "", err
	}
	var b bytes.Buffer
	_, _ = b.ReadFrom(r)
	return code, b.String(), nil
}

// Close removes every container and the network.
func (e *Env) Close(ctx context.Context) error {
	e.mu.Lock()
	cs := make([]*testcontainers.DockerContainer, 0, len(e.containers))
	for _, c := range e.containers {
		cs = append(cs, c)
	}
	e.containers = map[string]*testcontainers.DockerContainer{}
	e.mu.Unlock()
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Terminate(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if e.Network != nil {
		if err := e.Network.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, vol := range e.volumes {
		if out, err := exec.CommandContext(ctx, "docker", "volume", "rm", "-f", vol).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("remove volume %s: %v: %s", vol, err, out))
		}
	}
	return errors.Join(errs...)
}

// Nodes lists every node started so far, in start order.
func (e *Env) Nodes() []model.Node {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]model.Node(nil), e.nodes...)
}

// StartObjectStore starts a real S3-compatible object store (SeaweedFS, see
// devcluster/objectstore) with a bucket ready, its data under dir. It binds the Env's network
// gateway, the host's own address on that network, so the Valkey containers and the host
// reach the same endpoint. The caller stops it (store.Stop) before Close removes the network:
// register its cleanup after the Env's.
func (e *Env) StartObjectStore(ctx context.Context, dir string) (*objectstore.Store, error) {
	bin, err := objectstore.FindBin()
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "docker", "network", "inspect", "--format", "{{range .IPAM.Config}}{{.Gateway}} {{end}}", e.Network.ID).Output()
	if err != nil {
		return nil, fmt.Errorf("inspect network %s: %w", e.Network.Name, err)
	}
	var gw netip.Addr
	for _, f := range strings.Fields(string(out)) {
		if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
			gw = a
			break
		}
	}
	if !gw.IsValid() {
		return nil, fmt.Errorf("network %s has no IPv4 gateway (%q)", e.Network.Name, out)
	}
	return objectstore.Start(ctx, objectstore.Config{Bin: bin, Dir: dir, IP: gw})
}
