package valkeyops

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Observe returns a typed snapshot. Unreachable nodes are present with Reachable=false, never
// dropped. The error is reserved for caller mistakes (duplicate names); node failures live in
// the snapshot.
func (a *Admin) Observe(ctx context.Context, nodes []model.Node) (*model.Snapshot, error) {
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n.Name] {
			return nil, model.NewOpError(n.Name, "observe", fmt.Errorf("%w: duplicate node name", model.ErrInvalidSpec))
		}
		seen[n.Name] = true
	}
	snap := &model.Snapshot{Nodes: make([]model.NodeState, len(nodes))}
	_ = parallel(nodes, func(n model.Node) error {
		i := indexOf(nodes, n.Name)
		snap.Nodes[i] = a.observeOne(ctx, n)
		return nil
	})
	internalAddresses(snap)
	return snap, nil
}

// internalAddresses rewrites, in every observed view, the address of each observed server
// that announces a client address of its own (cluster-announce-client-ipv4, external access)
// back to the address the operator reaches it at. A server shows every client, the operator
// included, its peers' client addresses in CLUSTER NODES, so without this the planner would
// take the external addresses for where the servers are (re-introducing them at their "old"
// addresses, asking MIGRATE to dial a load balancer from inside the cluster, or waiting for
// a MEET to be seen at the pod IP for ever). Only a server told to announce a client address
// (model.Node.ClientAddr) whose own line shows that very address counts, and only an entry
// that shows it is rewritten: one that still shows an older address is stale and stays so,
// for the planner to see. A server that restarted at a new IP shows its old one as its own
// until its peers tell it otherwise; taken for a client address, the stale entries would be
// rewritten to look current and never be re-introduced.
func internalAddresses(snap *model.Snapshot) {
	type shown struct{ client, internal string }
	byID := map[string]shown{}
	for i := range snap.Nodes {
		st := &snap.Nodes[i]
		if !st.Reachable || st.ID == "" || st.ClientAddr == "" {
			continue
		}
		if self := st.Self(); self != nil && self.Addr() == st.ClientAddr && self.Addr() != st.Addr {
			byID[st.ID] = shown{self.Addr(), st.Addr}
		}
	}
	if len(byID) == 0 {
		return
	}
	for i := range snap.Nodes {
		for j := range snap.Nodes[i].View {
			p := &snap.Nodes[i].View[j]
			s, ok := byID[p.ID]
			if !ok || p.Addr() != s.client {
				continue
			}
			host, port, err := net.SplitHostPort(s.internal)
			if err != nil {
				continue
			}
			p.IP = host
			p.Port, _ = strconv.Atoi(port)
		}
	}
}

func indexOf(nodes []model.Node, name string) int {
	for i, n := range nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// observeNodeTimeout bounds one node's observation: a server that does not answer three
// read commands in this long (hung, frozen, cut off) counts as unreachable, rather than
// holding up the observation of every other node for as long as the caller would wait.
const observeNodeTimeout = 2 * time.Second

func (a *Admin) observeOne(ctx context.Context, n model.Node) model.NodeState {
	st := model.NodeState{Node: n}
	ctx, cancel := context.WithTimeout(ctx, observeNodeTimeout)
	defer cancel()
	// Three commands a node: an idle Active cluster is observed every few seconds, so each
	// one counts (INFO takes several sections at once since Valkey 7).
	cmds := [][]string{{"CLUSTER", "NODES"}, {"CLUSTER", "INFO"}, {"INFO", "replication", "server", "keyspace", "persistence"}}
	res, err := a.multi(ctx, n, "observe", cmds)
	var serverSaid *valkey.ValkeyError
	if err != nil && !errors.As(err, &serverSaid) && ctx.Err() == nil {
		// A pooled connection can outlive its server: a new pod may have been given the old
		// one's IP. multi dropped that connection; one retry dials the address afresh.
		res, err = a.multi(ctx, n, "observe", cmds)
	}
	if err != nil {
		st.Err = err
		return st
	}
	texts := make([]string, len(res))
	for i, r := range res {
		if texts[i], err = r.ToString(); err != nil {
			st.Err = model.NewOpError(n.Name, "observe", err)
			return st
		}
		texts[i] = stripVerbatim(texts[i])
	}
	parsed, err := model.ParseNodeState(n, texts[0], texts[1], texts[2])
	if err != nil {
		st.Err = model.NewOpError(n.Name, "observe", err)
		return st
	}
	return parsed
}

// stripVerbatim removes the RESP3 verbatim-string format prefix ("txt:") that valkey-go keeps
// on replies such as CLUSTER NODES, CLUSTER INFO and INFO.
func stripVerbatim(s string) string {
	if len(s) >= 4 && s[3] == ':' && (s[:3] == "txt" || s[:3] == "mkd") {
		return s[4:]
	}
	return s
}
