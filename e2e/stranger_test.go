//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStranger makes the server of one 1x0 cluster meet the server of another by hand
// (CLUSTER MEET, as the operator's user): Valkey merges them at once, and both claim every
// slot at the same config epoch, so the node with the lower ID bumps its epoch and takes the
// other's slots. Each cluster's operator pass finds the other's node among its server's peers,
// forgets it with a StrangerForgotten Warning Event, and heals: the server that lost its slots
// (an empty primary that kept its keys: cluster-allow-replica-migration is off) is given its
// even range again. Both end apart, Active throughout, serving all 16384 slots each.
func TestStranger(t *testing.T) {
	n := newNamespace(t, "e2e-stranger")
	applyMenu(n)
	n.applyCluster("a", exampleConfig, 1, 0)
	n.applyCluster("b", exampleConfig, 1, 0)
	for _, c := range []string{"a", "b"} {
		n.waitState(c, "Active", 3*time.Minute)
		n.waitConverged(c, 1, 2*time.Minute)
	}
	pw := map[string]string{"a": n.secretValue("a-auth", "password"), "b": n.secretValue("b-auth", "password")}
	opPw := map[string]string{"a": n.secretValue("a-auth", "operator-password"), "b": n.secretValue("b-auth", "operator-password")}
	ip := map[string]string{}
	id := map[string]string{}
	for _, c := range []string{"a", "b"} {
		ips := n.podIPs(c)
		require.Len(t, ips, 1)
		ip[c] = ips[0]
		id[c] = n.nodeID(c, n.nodeWithRole(c, "primary"))
		cl := newClusterClient(t, addrsOf(ips), pw[c], nil)
		ctx, cancel := ctxTimeout(10 * time.Second)
		require.NoError(t, cl.Do(ctx, cl.B().Set().Key("stranger:"+c).Value(c).Build()).Error())
		cancel()
	}
	watchA, watchB := n.watchState("a"), n.watchState("b")

	start := time.Now()
	_, err := operatorCommand(ip["a"], opPw["a"], "CLUSTER", "MEET", ip["b"], "6379", "16379")
	require.NoError(t, err, "CLUSTER MEET by hand")
	n.eventually(15*time.Second, 100*time.Millisecond, "the two servers merged", func() (bool, string, error) {
		view, err := n.view(ip["a"], opPw["a"])
		if err != nil {
			return false, err.Error(), nil
		}
		peer := peerOf(view, id["b"])
		return peer != nil && !peer.InHandshake(), describeView(view), nil
	})
	// What the merge did, before the operator separates them (it observes an idle cluster
	// every 30 s).
	time.Sleep(2 * time.Second)
	for _, c := range []string{"a", "b"} {
		if view, err := n.view(ip[c], opPw[c]); err == nil {
			keys, _ := operatorCommand(ip[c], opPw[c], "DBSIZE")
			size, _ := keys.AsInt64()
			t.Logf("e2e: stranger: merged view of %s's server (%d keys): %s", c, size, describeView(view))
		}
	}

	n.eventually(90*time.Second, time.Second, "the clusters apart again, each serving every slot", func() (bool, string, error) {
		for c, other := range map[string]string{"a": "b", "b": "a"} {
			view, err := n.view(ip[c], opPw[c])
			if err != nil {
				return false, err.Error(), nil
			}
			if peerOf(view, id[other]) != nil || len(view) != 1 {
				return false, fmt.Sprintf("%s's server still knows %s", c, describeView(view)), nil
			}
			if out, err := clusterCheck(ip[c]+":6379", pw[c]); err != nil || !strings.Contains(out, "[OK] All 16384 slots covered.") {
				return false, fmt.Sprintf("%s: %s", c, stripANSI(out)), nil
			}
		}
		return true, "", nil
	})
	t.Logf("e2e: stranger: apart and healed %.1fs after the MEET", time.Since(start).Seconds())
	for _, c := range []string{"a", "b"} {
		n.waitConverged(c, 1, time.Minute)
	}

	warnings := n.kubectl("get", "events", "--field-selector", "reason=StrangerForgotten,type=Warning",
		"-o", "jsonpath={range .items[*]}{.involvedObject.name}: {.message}{\"\\n\"}{end}")
	t.Logf("e2e: stranger: warnings:\n%s", warnings)
	found := 0
	for c, other := range map[string]string{"a": "b", "b": "a"} {
		for _, line := range strings.Split(warnings, "\n") {
			if strings.HasPrefix(line, c+": ") && strings.Contains(line, id[other]) && strings.Contains(line, ip[other]+":6379") {
				found++
			}
		}
	}
	assert.Positive(t, found, "a Warning Event on a cluster names the other's node and address")

	// Whether data was lost: each cluster's key, written before the MEET, read back.
	for _, c := range []string{"a", "b"} {
		cl := newClusterClient(t, addrsOf([]string{ip[c]}), pw[c], nil)
		ctx, cancel := ctxTimeout(10 * time.Second)
		v, err := cl.Do(ctx, cl.B().Get().Key("stranger:"+c).Build()).ToString()
		cancel()
		t.Logf("e2e: stranger: cluster %s's key after the merge: %q %v", c, v, err)
		assert.Equal(t, c, v, "cluster %s's key survives the merge (a primary that lost every slot kept its keys)", c)
	}
	assert.Equal(t, []string{"Active"}, watchA.states(), "cluster a reports Active throughout")
	assert.Equal(t, []string{"Active"}, watchB.states(), "cluster b reports Active throughout")
}

// view is CLUSTER NODES of the server at ip, read as the operator.
func (n *ns) view(ip, operatorPw string) ([]model.ClusterNode, error) {
	msg, err := operatorCommand(ip, operatorPw, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	text, err := msg.ToString()
	if err != nil {
		return nil, err
	}
	return model.ParseClusterNodes(strings.TrimPrefix(text, "txt:"))
}

func peerOf(view []model.ClusterNode, id string) *model.ClusterNode {
	for i := range view {
		if view[i].ID == id {
			return &view[i]
		}
	}
	return nil
}

// describeView is one line per node: ID, address, flags, config epoch and slot count.
func describeView(view []model.ClusterNode) string {
	var parts []string
	for _, cn := range view {
		parts = append(parts, fmt.Sprintf("%s %s %s epoch=%d slots=%d", cn.ID[:8], cn.Addr(), strings.Join(cn.Flags, ","), cn.ConfigEpoch, model.CountSlots(cn.Slots)))
	}
	return strings.Join(parts, "; ")
}
