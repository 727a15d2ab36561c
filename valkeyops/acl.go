package valkeyops

import (
	"context"
	"fmt"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// ApplyACL makes every node's live users match spec (ACL SETUSER ... reset, ACL DELUSER for
// users no longer in the spec) and then verifies each user with ACL GETUSER. The file is not
// saved: nodes load the rendered ConfigMap on restart.
func (a *Admin) ApplyACL(ctx context.Context, nodes []model.Node, spec model.ACLSpec) error {
	if err := model.ValidateACL(spec); err != nil {
		return err
	}
	lines := spec.Lines()
	want := spec.Expected()
	return parallel(nodes, func(n model.Node) error {
		// The operator's own user goes first so nothing after it can lock the operator out.
		cmds := make([][]string, 0, len(lines))
		for _, l := range lines {
			cmd := append([]string{"ACL", "SETUSER", l.User, "reset"}, l.Rules...)
			if l.User == model.OperatorUser {
				cmds = append([][]string{cmd}, cmds...)
			} else {
				cmds = append(cmds, cmd)
			}
		}
		if _, err := a.multi(ctx, n, "acl-setuser", cmds); err != nil {
			return err
		}
		msg, err := a.cmd(ctx, n, "acl-users", "ACL", "USERS")
		if err != nil {
			return err
		}
		live, err := msg.AsStrSlice()
		if err != nil {
			return model.NewOpError(n.Name, "acl-users", err)
		}
		for _, name := range live {
			if _, ok := want[name]; !ok {
				if _, err := a.cmd(ctx, n, "acl-deluser", "ACL", "DELUSER", name); err != nil {
					return err
				}
			}
		}
		for _, l := range lines {
			if err := a.verifyUser(ctx, n, l.User, want[l.User]); err != nil {
				return err
			}
		}
		return nil
	})
}

// verifyUser reads user name back with ACL GETUSER and compares it with want.
func (a *Admin) verifyUser(ctx context.Context, n model.Node, name string, want model.UserACL) error {
	msg, err := a.cmd(ctx, n, "acl-verify", "ACL", "GETUSER", name)
	if err != nil {
		return err
	}
	got, err := parseGetUser(msg)
	if err != nil {
		return model.NewOpError(n.Name, "acl-verify", fmt.Errorf("user %s: %w", name, err))
	}
	if err := model.CompareUser(want, got); err != nil {
		return model.NewOpError(n.Name, "acl-verify", fmt.Errorf("user %s: %w", name, err))
	}
	return nil
}
