package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Live credentials (docs/users-and-passwords.md: ACL edits reach every node without a restart;
// the auth Secret's passwords can be rotated). Every Active pass reads what each ready server
// holds — its ACL users and its replication login — and changes a server only where that
// differs from what it should hold, so a converged cluster gets no Valkey write and no API
// write. Servers are changed live (ACL SETUSER / DELUSER, CONFIG SET masterauth), never by ACL
// LOAD: the mounted ACL file (the ConfigMap ensureACL keeps) is only what a server started
// later reads, and it already says the same.
//
// The operator's own password is the delicate one: the operator logs in with it and
// replicas authenticate to their primaries with it, so it must never be taken away from a
// server while anyone may still use it. A rotation from the recorded login password C (the
// {cluster}-auth-applied Secret) to the wanted one D (operator-password in {cluster}-auth)
// runs in two passes:
//
//  1. every node's operator user accepts both C and D (the ACL file says the same); once
//     every ValkeyNode is a ready server that holds D, the record becomes D;
//  2. logged in with D, every server's masterauth becomes D; then C is removed everywhere.
//
// At every point some password the record or the Secret names is accepted everywhere, so an
// operator restarted at any moment logs in again. While a ValkeyNode is not a readable
// server (a pod starting, one lost) no server loses any operator password: that node may
// authenticate with one.
//
// The replication, exporter and backup users' passwords are derived from the operator
// password (model.ReplicationPassword, ExporterPassword, BackupPassword) and rotate with it,
// in the same passes.
// One exception: an exporter sidecar reads its password file once, when its pod starts, so
// it keeps logging in with the password of the login its pod was created under. That pod's
// server alone keeps accepting it (the pod's AnnotationExporterPassword names its hash) until
// the pod is replaced; it opens nothing but the exporter user's statistics.

// credentialsPlan is what one pass changes on the servers.
type credentialsPlan struct {
	// fixes are the members whose ACL differs from what they should hold, grouped by the
	// ACL they should hold (they differ only by the password hashes a node keeps). They are
	// applied first: a replication login set afterwards must find its user everywhere.
	fixes []aclFix
	// replication lists the members whose replication login (masteruser, masterauth) is not
	// the one that goes with the operator's login.
	replication []model.Node
	// switchLogin: every node accepts the wanted operator password; record it as the login.
	switchLogin bool
	// retired: the servers stop accepting a previous password.
	retired bool
	// waiting names the nodes a rotation waits for ("" when it waits for none).
	waiting string
}

// aclFix is one ACL applied to some members, and the users that made it necessary.
type aclFix struct {
	spec  model.ACLSpec
	nodes []model.Node
	users []string
}

// planCredentials decides what a pass changes. spec is the cluster's ACL; login is the
// operator password the servers are known to accept, wanted the auth Secret's; nodes names
// every ValkeyNode of the cluster; held is what the ready ones hold; exporters maps a node to
// the hash of the password its exporter sidecar logs in with (its pod's annotation). It is
// pure.
//
// Only what differs is changed. The operator user and the users whose passwords are derived
// from it (loginUsers) accept the passwords of login and wanted (rotating). A server keeps every other hash it accepts while
// a password may still be in use: while some node is not readable (it may be a replica that
// authenticates with one of them) and while some server's replication login is still to be
// changed (its replica may reconnect with the old one before this pass changes it). A
// server's exporter user also keeps the hash its own exporter logs in with, but only one it
// already accepts: the annotation can keep a password the operator gave that server, never
// add one.
func planCredentials(spec model.ACLSpec, login, wanted string, nodes []string, held []model.AuthState, exporters map[string]string) credentialsPlan {
	var plan credentialsPlan
	read := map[string]bool{}
	for _, st := range held {
		if st.Err == nil {
			read[st.Node.Name] = true
		}
	}
	var unseen []string
	for _, n := range nodes {
		if !read[n] {
			unseen = append(unseen, n)
		}
	}
	replUser, replPassword := model.ReplicationLogin(login)
	for _, st := range held {
		if st.Err == nil && (st.MasterUser != replUser || st.MasterAuthHash != model.HashPassword(replPassword)) {
			plan.replication = append(plan.replication, st.Node)
		}
	}
	keepAll := len(unseen) > 0 || len(plan.replication) > 0
	base := rotating(spec, login, wanted)

	byExtras := map[string]int{}
	for _, st := range held {
		if st.Err != nil {
			continue
		}
		want := base
		stale := 0
		var sets []string
		for _, u := range loginUsers {
			extra := u.extra(&want)
			old := extraHashes(st.Users[u.name].Hashes, u.password(login), u.password(wanted))
			if pin := exporters[st.Node.Name]; u.name == model.ExporterUser && slices.Contains(old, pin) {
				old = slices.DeleteFunc(old, func(h string) bool { return h == pin })
				*extra = append(slices.Clone(*extra), pin)
			}
			if keepAll {
				*extra = append(slices.Clone(*extra), old...)
			}
			stale += len(old)
			sets = append(sets, strings.Join(sortedSet(*extra), ","))
		}
		if !keepAll && stale > 0 {
			plan.retired = true
		}
		drift := model.ACLDrift(want, st.Users)
		if len(drift) == 0 {
			continue
		}
		// Group by the hash sets, the only part that varies between nodes.
		k := strings.Join(sets, "/")
		i, ok := byExtras[k]
		if !ok {
			i = len(plan.fixes)
			byExtras[k] = i
			plan.fixes = append(plan.fixes, aclFix{spec: want})
		}
		f := &plan.fixes[i]
		f.nodes = append(f.nodes, st.Node)
		for _, u := range model.DriftedUsers(drift) {
			if !slices.Contains(f.users, u) {
				f.users = append(f.users, u)
			}
		}
	}
	if login != wanted {
		if len(unseen) == 0 {
			plan.switchLogin = true
		} else {
			plan.waiting = strings.Join(unseen, ", ")
		}
	}
	return plan
}

// rotating is spec with the operator logging in with login, and both sides of a rotation
// from login to wanted accepted: the operator user accepts the wanted password's hash, and
// each user whose password is derived from it (loginUsers) the hash of the one derived from
// the wanted password, besides the login's. A node started now gets this, and every server holds it
// before the switch.
func rotating(spec model.ACLSpec, login, wanted string) model.ACLSpec {
	spec.OperatorPassword = login
	for _, u := range loginUsers {
		*u.extra(&spec) = nil
		if wanted != "" && wanted != login {
			*u.extra(&spec) = []string{model.HashPassword(u.password(wanted))}
		}
	}
	return spec
}

// loginUser is a user whose password is the operator password or derived from it: how it
// is derived, and where an ACLSpec keeps the further hashes it accepts.
type loginUser struct {
	name     string
	password func(operatorPassword string) string
	extra    func(*model.ACLSpec) *[]string
}

// loginUsers are the users whose passwords rotate with the operator password.
var loginUsers = []loginUser{
	{model.OperatorUser, func(p string) string { return p }, func(s *model.ACLSpec) *[]string { return &s.OperatorExtraHashes }},
	{model.ReplicationUser, model.ReplicationPassword, func(s *model.ACLSpec) *[]string { return &s.ReplicationExtraHashes }},
	{model.ExporterUser, model.ExporterPassword, func(s *model.ACLSpec) *[]string { return &s.ExporterExtraHashes }},
	{model.BackupUser, model.BackupPassword, func(s *model.ACLSpec) *[]string { return &s.BackupExtraHashes }},
}

// exporterLogins maps each node whose pod runs the exporter to the hash of the password the
// exporter was started with (render.AnnotationExporterPassword).
func exporterLogins(p *pass) map[string]string {
	out := map[string]string{}
	for _, n := range p.nodes {
		if pod := p.pods[n.Name()]; pod != nil && pod.Annotations[render.AnnotationExporterPassword] != "" {
			out[n.Name()] = pod.Annotations[render.AnnotationExporterPassword]
		}
	}
	return out
}

// extraHashes are the hashes of have that are neither login's nor wanted's.
func extraHashes(have []string, login, wanted string) []string {
	var out []string
	for _, h := range have {
		if h != model.HashPassword(login) && h != model.HashPassword(wanted) {
			out = append(out, h)
		}
	}
	return out
}

func sortedSet(s []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(s)))
}

// syncCredentials brings every member's credentials, as this pass's observation read them,
// to what the cluster wants (see the top of this file). A failure is a Warning Event and is
// retried next pass; it never stops the topology work that follows.
func (r *Reconciler) syncCredentials(ctx context.Context, p *pass) *outcome {
	if p.seen == nil || p.seen.credentialInputs == "" {
		return nil // not read this pass (credentialsNeed)
	}
	if p.seen.authErr != nil {
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}
	inputs, held := p.seen.credentialInputs, p.seen.auth
	actx, cancel := context.WithTimeout(ctx, observeTimeout)
	defer cancel()
	for _, st := range held {
		if st.Err == nil {
			r.memory.loggedIn(p.key, p.operatorPassword) // it works: remembered should the record go
			break
		}
	}
	var names []string
	for _, n := range p.nodes {
		names = append(names, n.Name())
	}
	plan := planCredentials(p.acl, p.operatorPassword, p.operatorPasswordWanted, names, held, exporterLogins(p))
	if plan.idle() && allRead(held, len(p.nodes)) {
		r.memory.credentialsConverged(p.key, inputs, r.opts.Now())
	}

	fail := func(action string, err error) *outcome {
		p.raise(ReasonACLApplyFailed, action, fmt.Sprintf("%s failed: %v", action, err))
		return nil
	}
	for _, f := range plan.fixes {
		if err := p.valkey.Credentials.ApplyACL(actx, f.nodes, f.spec); err != nil {
			return fail("ApplyACL", err)
		}
		r.event(p, nil, ReasonACLApplied, "ApplyACL", "ACL applied live and verified on %d node(s) (%s); users changed: %s",
			len(f.nodes), strings.Join(nodeNames(f.nodes), ", "), strings.Join(f.users, ", "))
	}
	if len(plan.replication) > 0 {
		if err := p.valkey.Credentials.SyncReplicationAuth(actx, plan.replication); err != nil {
			return fail("SyncReplicationAuth", err)
		}
		p.log.Info("replication login set", "nodes", nodeNames(plan.replication))
	}
	p.settle(ReasonACLApplyFailed)
	if plan.retired && len(plan.fixes) > 0 {
		r.event(p, nil, ReasonCredentialRotated, "RetireOperatorPassword", "No node accepts the previous operator and replication passwords any more")
	}
	if plan.waiting != "" {
		p.log.Info("operator password rotation waits for nodes to be ready", "nodes", plan.waiting)
	}
	if !plan.switchLogin {
		return nil
	}
	if err := r.recordLogin(ctx, p, p.operatorPasswordWanted); err != nil {
		return r.applied(p, "AuthRecord", err)
	}
	r.memory.loggedIn(p.key, p.operatorPasswordWanted)
	r.event(p, nil, ReasonCredentialRotated, "SwitchOperatorLogin", "Every node accepts the new operator password; the operator logs in with it from now on")
	// The next pass logs in with the new password and retires the old one.
	return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
}

func nodeNames(nodes []model.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

// loginPassword reads the operator password the servers are known to accept: the record in
// {cluster}-auth-applied or, if that is gone, the one this process last logged in with.
// found is false when neither exists (a new cluster, or one from before the record).
func (r *Reconciler) loginPassword(ctx context.Context, p *pass) (pw string, found bool, err error) {
	s := &corev1.Secret{}
	key := types.NamespacedName{Namespace: p.key.Namespace, Name: render.AppliedAuthSecretName(p.key.Name)}
	err = r.client.Get(ctx, key, s)
	if apierrors.IsNotFound(err) {
		err = r.apiReader.Get(ctx, key, s)
	}
	switch {
	case err == nil:
		// A foreign object is not read; recordLogin reports it.
		if v := s.Data[render.AuthOperatorPasswordKey]; metav1.IsControlledBy(s, p.obj) && len(v) > 0 {
			return string(v), true, nil
		}
	case !apierrors.IsNotFound(err):
		return "", false, err
	}
	if v := r.memory.login(p.key); v != "" {
		return v, true, nil
	}
	return "", false, nil
}

// recordLogin keeps {cluster}-auth-applied holding pw, writing only when it differs.
func (r *Reconciler) recordLogin(ctx context.Context, p *pass, pw string) error {
	return apply(ctx, r, p, owned[*corev1.Secret, *corev1ac.SecretApplyConfiguration]{
		kind: "Secret", name: render.AppliedAuthSecretName(p.key.Name), live: &corev1.Secret{},
		desire: func(bool) (*corev1ac.SecretApplyConfiguration, error) {
			return render.AppliedAuthSecret(p.key.Name, p.key.Namespace, pw).WithOwnerReferences(p.clusterOwner()), nil
		},
		extract: corev1ac.ExtractSecret,
	})
}

// login is the operator password this process last logged in to the cluster's servers with.
// It is the fallback when {cluster}-auth-applied is deleted: the servers still accept it.
func (m *memory) login(key types.NamespacedName) (pw string) {
	m.peek(key, func(c *clusterMemory) { pw = c.login })
	return pw
}

// loggedIn remembers pw as the password the cluster's servers accept.
func (m *memory) loggedIn(key types.NamespacedName, pw string) {
	m.with(key, func(c *clusterMemory) { c.login = pw })
}

// CredentialWrites is the port of the credentials concern: the servers' users and
// replication login changed live.
type CredentialWrites interface {
	// ApplyACL makes the nodes' users exactly spec's, live, and verifies them.
	ApplyACL(ctx context.Context, nodes []model.Node, spec model.ACLSpec) error
	// SyncReplicationAuth sets the nodes' replication login to the one the client logs in
	// with, and verifies it.
	SyncReplicationAuth(ctx context.Context, nodes []model.Node) error
}
