//go:build envtest

package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The fake servers' credentials, the CredentialWrites port and the users half of Reads. A
// server holds what a real pod starts with — the users of the mounted ACL file ({cluster}-acl)
// and the replication login of the mounted replication.conf ({cluster}-auth) as the API server
// has them when the fake first meets the server — and then whatever ApplyACL and
// SyncReplicationAuth set. Like a real server it refuses (WRONGPASS) a login whose password its
// operator user does not accept, and an ACL that valkeyops would reject. The Active-phase
// tests' clusters get the same servers, from day2Valkey's base fakeValkey. The files are read from the
// suite's API server: a cluster on another control plane (TestActivePhase's own) cannot boot,
// so its servers read as unreadable and the live credentials step leaves them alone.

// fakeAuthServer is one server's credentials.
type fakeAuthServer struct {
	users                      map[string]model.UserACL
	masterUser, masterAuthHash string
}

// fakeCredentialState holds every fake server's credentials, by cluster and node name.
type fakeCredentialState struct {
	// wire counts the commands and has the credentials the client logs in with.
	wire    *fakeWire
	mu      sync.Mutex
	servers map[types.NamespacedName]map[string]*fakeAuthServer
	// refused counts logins a server refused, per cluster: the operator locking itself out.
	refused map[types.NamespacedName]int
}

func newFakeCredentialState(w *fakeWire) *fakeCredentialState {
	return &fakeCredentialState{wire: w, servers: map[types.NamespacedName]map[string]*fakeAuthServer{}, refused: map[types.NamespacedName]int{}}
}

// cluster is the credentials port of one cluster's servers.
func (a *fakeCredentialState) cluster(key types.NamespacedName) *fakeCredentials {
	return &fakeCredentials{a: a, key: key}
}

func (a *fakeCredentialState) refusedCount(key types.NamespacedName) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refused[key]
}

// held returns a copy of what the named server holds (nil if the fake never met it).
func (a *fakeCredentialState) held(key types.NamespacedName, node string) *fakeAuthServer {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.servers[key][node]
	if s == nil {
		return nil
	}
	c := *s
	return &c
}

// server returns node's credentials, booting it from the mounted files on first sight.
// a.mu must be held.
func (a *fakeCredentialState) server(ctx context.Context, key types.NamespacedName, node string) (*fakeAuthServer, error) {
	if s := a.servers[key][node]; s != nil {
		return s, nil
	}
	cm, sec := &corev1.ConfigMap{}, &corev1.Secret{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: render.ACLConfigMapName(key.Name)}, cm); err != nil {
		return nil, fmt.Errorf("fake: booting %s: ACL file: %w", node, err)
	}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: render.AuthSecretName(key.Name)}, sec); err != nil {
		return nil, fmt.Errorf("fake: booting %s: replication.conf: %w", node, err)
	}
	users, err := parseACLFile(cm.Data[render.ACLFileKey])
	if err != nil {
		return nil, fmt.Errorf("fake: booting %s: %w", node, err)
	}
	s := &fakeAuthServer{users: users}
	for _, line := range strings.Split(string(sec.Data[render.AuthReplicationConfKey]), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == "masteruser" {
			s.masterUser = v
		} else if ok && k == "masterauth" {
			s.masterAuthHash = model.HashPassword(v)
		}
	}
	if a.servers[key] == nil {
		a.servers[key] = map[string]*fakeAuthServer{}
	}
	a.servers[key][node] = s
	return s, nil
}

// fakeCredentials is one cluster's servers as the CredentialWrites port (and ReadAuth) reach
// them.
type fakeCredentials struct {
	a   *fakeCredentialState
	key types.NamespacedName
}

// login checks the client's password against the server's operator user, as AUTH would.
// Clients whose password the fake does not know (the Active-phase tests') are let in. c.a.mu must
// be held.
func (c *fakeCredentials) login(s *fakeAuthServer) error {
	pw := c.a.wire.lastCredentials(c.key).Password
	if pw == "" {
		return nil
	}
	for _, h := range s.users[model.OperatorUser].Hashes {
		if h == model.HashPassword(pw) {
			return nil
		}
	}
	c.a.refused[c.key]++
	return errors.New("WRONGPASS invalid username-password pair or user is disabled")
}

func (c *fakeCredentials) ReadAuth(ctx context.Context, nodes []model.Node) ([]model.AuthState, error) {
	c.a.wire.call(c.key)
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	out := make([]model.AuthState, len(nodes))
	for i, n := range nodes {
		out[i].Node = n
		s, err := c.a.server(ctx, c.key, n.Name)
		if err == nil {
			err = c.login(s)
		}
		if err != nil {
			out[i].Err = &model.OpError{Node: n.Name, Step: "acl-read", Err: err}
			continue
		}
		out[i].Users = map[string]model.UserACL{}
		for name, u := range s.users {
			out[i].Users[name] = u
		}
		out[i].MasterUser, out[i].MasterAuthHash = s.masterUser, s.masterAuthHash
	}
	return out, nil
}

func (c *fakeCredentials) ApplyACL(ctx context.Context, nodes []model.Node, spec model.ACLSpec) error {
	c.a.wire.write(c.key)
	if err := model.ValidateACL(spec); err != nil {
		return err
	}
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	for _, n := range nodes {
		s, err := c.a.server(ctx, c.key, n.Name)
		if err == nil {
			err = c.login(s)
		}
		if err != nil {
			return &model.OpError{Node: n.Name, Step: "acl-setuser", Err: err}
		}
		s.users = spec.Expected()
	}
	return nil
}

func (c *fakeCredentials) SyncReplicationAuth(ctx context.Context, nodes []model.Node) error {
	cred := c.a.wire.write(c.key)
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	for _, n := range nodes {
		s, err := c.a.server(ctx, c.key, n.Name)
		if err == nil {
			err = c.login(s)
		}
		if err != nil {
			return &model.OpError{Node: n.Name, Step: "set-replication-auth", Err: err}
		}
		if cred.Password == "" {
			return &model.OpError{Node: n.Name, Step: "set-replication-auth", Err: errors.New("fake: the client's password is unknown")}
		}
		user, pw := model.ReplicationLogin(cred.Password)
		s.masterUser, s.masterAuthHash = user, model.HashPassword(pw)
	}
	return nil
}

// parseACLFile reads the users of an ACL file as the operator renders it (model.RenderACL)
// into what ACL GETUSER would report for each.
func parseACLFile(text string) (map[string]model.UserACL, error) {
	users := map[string]model.UserACL{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "user" {
			return nil, fmt.Errorf("ACL file line %q", line)
		}
		var u model.UserACL
		type sel struct{ commands, keys, channels []string }
		root := &sel{}
		cur, sels := root, []*sel(nil)
		for _, tok := range f[2:] {
			if strings.HasPrefix(tok, "(") {
				cur = &sel{}
				sels = append(sels, cur)
				tok = strings.TrimPrefix(tok, "(")
			}
			closing := strings.HasSuffix(tok, ")")
			tok = strings.TrimSuffix(tok, ")")
			switch {
			case tok == "on":
				u.On = true
			case tok == "resetchannels", tok == "":
			case strings.HasPrefix(tok, "#"):
				u.Hashes = append(u.Hashes, tok[1:])
			case strings.HasPrefix(tok, "~"), strings.HasPrefix(tok, "%"):
				cur.keys = append(cur.keys, tok)
			case strings.HasPrefix(tok, "&"):
				cur.channels = append(cur.channels, tok)
			case strings.HasPrefix(tok, "+"), strings.HasPrefix(tok, "-"):
				cur.commands = append(cur.commands, tok)
			default:
				return nil, fmt.Errorf("ACL file: unknown rule %q", tok)
			}
			if closing {
				cur = root
			}
		}
		for _, s := range append([]*sel{root}, sels...) {
			u.Selectors = append(u.Selectors, model.ACLSelector{
				Commands: strings.Join(s.commands, " "), Keys: strings.Join(s.keys, " "), Channels: strings.Join(s.channels, " "),
			})
		}
		slices.Sort(u.Hashes)
		users[f[1]] = u
	}
	return users, nil
}
