//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/valkeycli"
	"github.com/valkey-io/valkey-go"
)

// clusterCheck runs `valkey-cli --cluster check` against addr with the default user's
// password and returns its output and whether it exited 0.
func clusterCheck(addr, password string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := valkeycli.Command(ctx, password, "--cluster", "check", addr).CombinedOutput()
	return string(out), err
}

// clusterNode is one line of CLUSTER NODES, as far as these tests need it.
type clusterNode struct {
	ID, Addr string
	Primary  bool
	Slots    []string
}

// parseClusterNodes reads CLUSTER NODES output: "<id> <ip:port@bus[,host]> <flags> <primary>
// <ping> <pong> <epoch> <link> <slot>...".
func parseClusterNodes(text string) []clusterNode {
	// Over RESP3 the reply is a verbatim string, which valkey-go hands over with its format
	// prefix ("txt:") still in front of the first node's ID.
	text = strings.TrimPrefix(text, "txt:")
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr := f[1]
		if i := strings.IndexAny(addr, "@,"); i >= 0 {
			addr = addr[:i]
		}
		n := clusterNode{ID: f[0], Addr: addr}
		for _, flag := range strings.Split(f[2], ",") {
			if flag == "master" {
				n.Primary = true
			}
		}
		n.Slots = f[8:]
		nodes = append(nodes, n)
	}
	return nodes
}

// newClusterClient is a cluster-mode valkey-go client authenticating as the default user.
func newClusterClient(t *testing.T, addrs []string, password string, tlsConfig *tls.Config) valkey.Client {
	t.Helper()
	return newClient(t, valkey.ClientOption{InitAddress: addrs, Password: password, TLSConfig: tlsConfig})
}

// newNodeClient talks to exactly one server, whatever its cluster mode.
func newNodeClient(t *testing.T, addr, password string) valkey.Client {
	t.Helper()
	return newClient(t, valkey.ClientOption{InitAddress: []string{addr}, Password: password, ForceSingleClient: true})
}

// newClient opens a client with the tests' dialer and no client-side cache, closed when t ends.
func newClient(t *testing.T, o valkey.ClientOption) valkey.Client {
	t.Helper()
	o.DisableCache, o.Dialer = true, dialer()
	c, err := valkey.NewClient(o)
	if err != nil {
		t.Fatalf("valkey client to %v: %v", o.InitAddress, err)
	}
	t.Cleanup(c.Close)
	return c
}

func dialer() net.Dialer { return net.Dialer{Timeout: 5 * time.Second} }

func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func addrsOf(ips []string) []string {
	var out []string
	for _, ip := range ips {
		out = append(out, fmt.Sprintf("%s:6379", ip))
	}
	return out
}
