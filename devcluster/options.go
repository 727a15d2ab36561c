package devcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/gomomento/valkey-operator/devcluster/controlplane"
	"github.com/gomomento/valkey-operator/devcluster/objectstore"
)

// DefaultValkeyImage is run for any image that is not present locally.
const DefaultValkeyImage = "valkey-operator/valkey:8.0"

// DefaultValkey9Image is run for missing images whose tag starts with 9.
const DefaultValkey9Image = "valkey-operator/valkey:9.1"

// Options configure a dev cluster. Zero values get defaults (see
// withDefaults); the result is saved in the state directory so later
// commands (nodes, down) find the same instance.
type Options struct {
	// Root is the repository root (holds bin/controlplane).
	Root string `json:"root"`
	// StateDir holds all state; default Root/.dev.
	StateDir string `json:"stateDir"`
	// Instance names the Docker network and labels; default "dev".
	Instance        string   `json:"instance"`
	Nodes           int      `json:"nodes"`
	Zones           []string `json:"zones"`
	APIServerPort   int      `json:"apiServerPort"`
	EtcdPort        int      `json:"etcdPort"`
	EtcdPeerPort    int      `json:"etcdPeerPort"`
	KubeletBasePort int      `json:"kubeletBasePort"`
	// ObjectStorePort is the object store's S3 port on the network's gateway address; its
	// other parts take the seven ports after it (see devcluster/objectstore).
	ObjectStorePort int `json:"objectStorePort"`
	// ValkeyImage replaces images that are not present locally
	// (env VALKEY_IMAGE); Valkey9Image replaces missing images tagged 9.x
	// (env VALKEY9_IMAGE), when it exists locally.
	ValkeyImage  string `json:"valkeyImage"`
	Valkey9Image string `json:"valkey9Image"`
	// Detach runs everything as background processes that outlive the
	// caller (devcluster up). Otherwise processes die with the caller and
	// the nodes run inside it (tests).
	Detach bool `json:"detach"`
	// NodesCommand runs the nodes process when detached: argv to which
	// "--state-dir DIR" is appended.
	NodesCommand []string `json:"nodesCommand,omitempty"`
	// Log receives progress lines; nil discards them.
	Log io.Writer `json:"-"`
}

func (o Options) withDefaults() (Options, error) {
	if o.Root == "" {
		root, err := FindRoot()
		if err != nil {
			return o, err
		}
		o.Root = root
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join(o.Root, ".dev")
	}
	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return o, err
	}
	o.StateDir = abs
	if o.Instance == "" {
		o.Instance = "dev"
	}
	if o.Nodes == 0 {
		o.Nodes = 6
	}
	if len(o.Zones) == 0 {
		o.Zones = []string{"zone-a", "zone-b", "zone-c"}
	}
	if o.APIServerPort == 0 {
		o.APIServerPort = 16443
	}
	if o.EtcdPort == 0 {
		o.EtcdPort = 12379
	}
	if o.EtcdPeerPort == 0 {
		o.EtcdPeerPort = 12380
	}
	if o.KubeletBasePort == 0 {
		o.KubeletBasePort = 10250
	}
	if o.ObjectStorePort == 0 {
		o.ObjectStorePort = 18333
	}
	if o.ValkeyImage == "" {
		o.ValkeyImage = os.Getenv("VALKEY_IMAGE")
	}
	if o.ValkeyImage == "" {
		o.ValkeyImage = DefaultValkeyImage
	}
	if o.Valkey9Image == "" {
		o.Valkey9Image = os.Getenv("VALKEY9_IMAGE")
	}
	if o.Valkey9Image == "" {
		o.Valkey9Image = DefaultValkey9Image
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o, nil
}

// FindRoot walks up from the working directory, then from this source
// file, to the directory holding the project's go.mod.
func FindRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/gomomento/valkey-operator\n") {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("cannot find the valkey-operator repository root (go.mod); pass the root explicitly")
}

func (o Options) controlPlane(advertise net.IP) controlplane.Config {
	return controlplane.Config{
		BinDir:        filepath.Join(o.Root, "bin", "controlplane"),
		StateDir:      o.StateDir,
		EtcdPort:      o.EtcdPort,
		EtcdPeerPort:  o.EtcdPeerPort,
		APIServerPort: o.APIServerPort,
		AdvertiseIP:   advertise,
		Detach:        o.Detach,
	}
}

func (o Options) objectStore(ip netip.Addr) objectstore.Config {
	return objectstore.Config{
		Bin:    objectstore.BinPath(o.Root),
		Dir:    objectStoreDir(o.StateDir),
		IP:     ip,
		Port:   o.ObjectStorePort,
		Detach: o.Detach,
	}
}

func objectStoreDir(stateDir string) string { return filepath.Join(stateDir, "objectstore") }

// ObjectStoreEnvFile is where a cluster writes its object store's endpoint, bucket and keys
// (ENDPOINT=, BUCKET=, ACCESS_KEY=, SECRET_KEY=; mode 0600): .dev/object-store.env for
// `make dev`.
func ObjectStoreEnvFile(stateDir string) string { return filepath.Join(stateDir, "object-store.env") }

func optionsFile(stateDir string) string { return filepath.Join(stateDir, "cluster.json") }

// LoadOptions reads the options saved by Up.
func LoadOptions(stateDir string) (Options, error) {
	b, err := os.ReadFile(optionsFile(stateDir))
	if err != nil {
		return Options{}, err
	}
	var o Options
	if err := json.Unmarshal(b, &o); err != nil {
		return Options{}, fmt.Errorf("%s: %w", optionsFile(stateDir), err)
	}
	o.Log = io.Discard
	return o, nil
}
