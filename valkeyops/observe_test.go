package valkeyops

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

func TestStripVerbatim(t *testing.T) {
	tests := []struct{ in, want string }{
		{"txt:cluster_state:ok", "cluster_state:ok"},
		{"cluster_state:ok", "cluster_state:ok"},
		{"abc", "abc"},
		{"", ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, stripVerbatim(tt.in))
	}
}

// TestInternalAddresses: a server announcing a client address is shown, in every observed
// view, at the address the operator reaches it at; an entry still holding an older address,
// a server announcing nothing, and a peer that was not observed are left as they are.
func TestInternalAddresses(t *testing.T) {
	view := func(entries ...model.ClusterNode) []model.ClusterNode { return entries }
	peer := func(id, ip string, port int, self bool) model.ClusterNode {
		n := model.ClusterNode{ID: id, IP: ip, Port: port, Flags: []string{"master"}}
		if self {
			n.Flags = []string{"myself", "master"}
		}
		return n
	}
	// a and b announce client addresses; d restarted at 10.0.0.4 and still shows its old IP
	// 10.0.0.8 as its own: not a client address, so its stale entries stay stale.
	snap := &model.Snapshot{Nodes: []model.NodeState{
		{Node: model.Node{Name: "a", Addr: "10.0.0.1:6379", ClientAddr: "127.100.0.1:6379"}, Reachable: true, ID: "A", View: view(
			peer("A", "127.100.0.1", 6379, true), peer("B", "127.100.0.2", 6379, false), peer("C", "10.0.0.3", 6379, false), peer("X", "127.100.0.9", 6379, false), peer("D", "10.0.0.8", 6379, false))},
		{Node: model.Node{Name: "b", Addr: "10.0.0.2:6379", ClientAddr: "127.100.0.2:6379"}, Reachable: true, ID: "B", View: view(
			peer("A", "10.0.0.7", 6379, false), peer("B", "127.100.0.2", 6379, true), peer("C", "10.0.0.3", 6379, false))},
		{Node: model.Node{Name: "c", Addr: "10.0.0.3:6379"}, Reachable: true, ID: "C", View: view(
			peer("A", "127.100.0.1", 6379, false), peer("B", "127.100.0.2", 6379, false), peer("C", "10.0.0.3", 6379, true))},
		{Node: model.Node{Name: "d", Addr: "10.0.0.4:6379"}, Reachable: true, ID: "D", View: view(
			peer("D", "10.0.0.8", 6379, true))},
	}}
	internalAddresses(snap)
	got := map[string][]string{}
	for _, st := range snap.Nodes {
		for _, p := range st.View {
			got[st.Name] = append(got[st.Name], p.ID+"@"+p.Addr())
		}
	}
	assert.Equal(t, map[string][]string{
		"a": {"A@10.0.0.1:6379", "B@10.0.0.2:6379", "C@10.0.0.3:6379", "X@127.100.0.9:6379", "D@10.0.0.8:6379"}, // D's old IP: kept
		"b": {"A@10.0.0.7:6379", "B@10.0.0.2:6379", "C@10.0.0.3:6379"},                                          // b's entry of A is stale: kept
		"c": {"A@10.0.0.1:6379", "B@10.0.0.2:6379", "C@10.0.0.3:6379"},
		"d": {"D@10.0.0.8:6379"},
	}, got)
}
