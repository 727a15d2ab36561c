package valkeyops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Reading what a node holds of the operator-managed credentials (model.AuthState, compared
// with the spec by model.ACLDrift), and setting the login its replication uses.

// ReadAuth reads, from every node in parallel and without changing anything, its ACL users
// (ACL USERS, then ACL GETUSER for each) and its replication login (CONFIG GET). A node that
// cannot be read is reported in its model.AuthState.Err, never dropped; the error is only for a
// context that ended.
func (a *Admin) ReadAuth(ctx context.Context, nodes []model.Node) ([]model.AuthState, error) {
	out := make([]model.AuthState, len(nodes))
	_ = parallelIdx(len(nodes), func(i int) error {
		out[i] = a.readAuth(ctx, nodes[i])
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, model.NewOpError("", "acl-read", err)
	}
	return out, nil
}

func (a *Admin) readAuth(ctx context.Context, n model.Node) model.AuthState {
	st := model.AuthState{Node: n}
	msg, err := a.cmd(ctx, n, "acl-read", "ACL", "USERS")
	if err != nil {
		st.Err = err
		return st
	}
	names, err := msg.AsStrSlice()
	if err != nil {
		st.Err = model.NewOpError(n.Name, "acl-read", err)
		return st
	}
	cmds := [][]string{{"CONFIG", "GET", "masteruser"}, {"CONFIG", "GET", "masterauth"}}
	for _, name := range names {
		cmds = append(cmds, []string{"ACL", "GETUSER", name})
	}
	res, err := a.multi(ctx, n, "acl-read", cmds)
	if err != nil {
		st.Err = err
		return st
	}
	if st.MasterUser, err = configValue(res[0], "masteruser"); err == nil {
		var auth string
		if auth, err = configValue(res[1], "masterauth"); auth != "" {
			st.MasterAuthHash = model.HashPassword(auth)
		}
	}
	if err != nil {
		st.Err = model.NewOpError(n.Name, "acl-read", err)
		return st
	}
	st.Users = map[string]model.UserACL{}
	for i, name := range names {
		msg, err := res[2+i].ToMessage()
		if err == nil {
			st.Users[name], err = parseGetUser(msg)
		}
		if err != nil {
			// A user deleted between ACL USERS and ACL GETUSER reads as nil: the next read
			// sees the node settled.
			st.Err = model.NewOpError(n.Name, "acl-read", fmt.Errorf("user %s: %w", name, err))
			st.Users = nil
			return st
		}
	}
	return st
}

// configValue reads the one value of a CONFIG GET reply (a RESP3 map or a RESP2 pair).
func configValue(r valkey.ValkeyResult, key string) (string, error) {
	m, err := r.AsStrMap()
	if err != nil {
		return "", fmt.Errorf("CONFIG GET %s: %w", key, err)
	}
	return m[key], nil
}

// setReplicationLogin sets n's replication login to the one that goes with the password
// this Admin logs in with.
func (a *Admin) setReplicationLogin(ctx context.Context, n model.Node) error {
	_, err := a.cmd(ctx, n, "set-replication-auth", a.replicationLoginCmd()...)
	return err
}

// replicationLoginCmd sets a node's replication login (see setReplicationLogin).
func (a *Admin) replicationLoginCmd() []string {
	user, pw := model.ReplicationLogin(a.opts.Credentials.Password)
	return []string{"CONFIG", "SET", "masteruser", user, "masterauth", pw}
}

// SyncReplicationAuth sets, on every node, the login its replication uses (masteruser and
// masterauth) to the one that goes with the password this Admin logs in with, as Bootstrap
// does, and verifies it by reading it back. Replicas use it the next time they connect to
// their primary; an established replication link is not disturbed.
func (a *Admin) SyncReplicationAuth(ctx context.Context, nodes []model.Node) error {
	user, pw := model.ReplicationLogin(a.opts.Credentials.Password)
	want := model.HashPassword(pw)
	return parallel(nodes, func(n model.Node) error {
		if err := a.setReplicationLogin(ctx, n); err != nil {
			return err
		}
		res, err := a.multi(ctx, n, "verify-replication-auth", [][]string{{"CONFIG", "GET", "masteruser"}, {"CONFIG", "GET", "masterauth"}})
		if err != nil {
			return err
		}
		gotUser, err := configValue(res[0], "masteruser")
		if err != nil {
			return model.NewOpError(n.Name, "verify-replication-auth", err)
		}
		gotAuth, err := configValue(res[1], "masterauth")
		if err != nil {
			return model.NewOpError(n.Name, "verify-replication-auth", err)
		}
		if gotUser != user || model.HashPassword(gotAuth) != want {
			return model.NewOpError(n.Name, "verify-replication-auth", errors.New("the replication login read back differs from the one set"))
		}
		return nil
	})
}

// parseGetUser reads an ACL GETUSER reply (RESP3 map or RESP2 flat array). A user that does
// not exist (a nil reply) is an error.
func parseGetUser(msg valkey.ValkeyMessage) (model.UserACL, error) {
	var u model.UserACL
	if msg.IsNil() {
		return u, errors.New("no such user")
	}
	m, err := msg.AsMap()
	if err != nil {
		return u, err
	}
	fl := m["flags"]
	flags, _ := fl.AsStrSlice()
	u.On = slices.Contains(flags, "on")
	pw := m["passwords"]
	u.Hashes, _ = pw.AsStrSlice()
	sort.Strings(u.Hashes)
	sel := func(m map[string]valkey.ValkeyMessage) model.ACLSelector {
		str := func(k string) string {
			v := m[k]
			s, _ := v.ToString()
			return s
		}
		return model.ACLSelector{Commands: str("commands"), Keys: str("keys"), Channels: str("channels")}
	}
	u.Selectors = append(u.Selectors, sel(m))
	sels := m["selectors"]
	list, _ := sels.ToArray()
	for _, s := range list {
		sm, err := s.AsMap()
		if err != nil {
			return u, err
		}
		u.Selectors = append(u.Selectors, sel(sm))
	}
	return u, nil
}
