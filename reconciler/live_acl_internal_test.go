package reconciler

import (
	"errors"
	"slices"
	"testing"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
)

// TestPlanCredentials: from what each ready server holds, one pass changes only what differs,
// and an operator password rotation never takes a password away from a server while someone
// may still use it.
func TestPlanCredentials(t *testing.T) {
	const c, d = "old-operator-pw", "new-operator-pw"
	app := model.ACLUser{Name: "app", PasswordHashes: []string{model.HashPassword("app-pw")}}
	spec := model.ACLSpec{DefaultPassword: "default-pw", Users: []model.ACLUser{app}}
	// holds is a readable server holding spec with the operator user accepting logins (and
	// the replication and exporter users the passwords derived from them), replicating with
	// the login that goes with masterauth.
	holds := func(name string, s model.ACLSpec, masterauth string, logins ...string) model.AuthState {
		s.OperatorPassword = logins[0]
		for _, l := range logins[1:] {
			s.OperatorExtraHashes = append(s.OperatorExtraHashes, model.HashPassword(l))
			s.ReplicationExtraHashes = append(s.ReplicationExtraHashes, model.HashPassword(model.ReplicationPassword(l)))
			s.ExporterExtraHashes = append(s.ExporterExtraHashes, model.HashPassword(model.ExporterPassword(l)))
			s.BackupExtraHashes = append(s.BackupExtraHashes, model.HashPassword(model.BackupPassword(l)))
		}
		user, pw := model.ReplicationLogin(masterauth)
		return model.AuthState{Node: model.Node{Name: name}, Users: s.Expected(),
			MasterUser: user, MasterAuthHash: model.HashPassword(pw)}
	}
	// asOperator is st replicating as the operator user, as servers did before the
	// replication user existed.
	asOperator := func(st model.AuthState, pw string) model.AuthState {
		st.MasterUser, st.MasterAuthHash = model.OperatorUser, model.HashPassword(pw)
		return st
	}
	// exporterKeeps is st whose exporter user also accepts the exporter password derived
	// from the operator password pw, as a server keeps it for its own exporter.
	exporterKeeps := func(st model.AuthState, pw string) model.AuthState {
		u := st.Users[model.ExporterUser]
		u.Hashes = slices.Sorted(slices.Values(append(slices.Clone(u.Hashes), exporterHash(pw))))
		st.Users[model.ExporterUser] = u
		return st
	}
	// withoutBackup is st as a server runs it under an operator from before the backup user:
	// its ACL file and its live users lack it.
	withoutBackup := func(st model.AuthState) model.AuthState {
		delete(st.Users, model.BackupUser)
		return st
	}
	unreadable := func(name string) model.AuthState {
		return model.AuthState{Node: model.Node{Name: name}, Err: errors.New("node unreachable")}
	}
	withoutApp := spec
	withoutApp.Users = nil
	newDefault := spec
	newDefault.DefaultPassword = "new-default-pw"

	type fix struct {
		nodes, users []string
		logins       []string // the operator passwords the fix's ACL accepts
		// exporterKeeps are operator passwords whose derived exporter password the fix's
		// exporter user keeps besides those of logins (its own exporter's).
		exporterKeeps []string
	}
	tests := []struct {
		name         string
		login, want  string
		spec         model.ACLSpec
		nodes        []string
		held         []model.AuthState
		replication  []string
		fixes        []fix
		switchLogin  bool
		retired      bool
		waitingFor   string
		acceptsExtra []string // passwords a fix keeps besides login and wanted (incomplete view)
		exporters    map[string]string
	}{
		{
			name: "converged: nothing to do", login: c, want: c, spec: spec, nodes: []string{"a", "b"},
			held: []model.AuthState{holds("a", spec, c, c), holds("b", spec, c, c)},
		},
		{
			name: "a new ACL user reaches every server", login: c, want: c, spec: spec, nodes: []string{"a", "b"},
			held:  []model.AuthState{holds("a", withoutApp, c, c), holds("b", withoutApp, c, c)},
			fixes: []fix{{nodes: []string{"a", "b"}, users: []string{"app"}, logins: []string{c}}},
		},
		{
			name: "only the server that differs is changed", login: c, want: c, spec: spec, nodes: []string{"a", "b"},
			held:  []model.AuthState{holds("a", spec, c, c), holds("b", withoutApp, c, c)},
			fixes: []fix{{nodes: []string{"b"}, users: []string{"app"}, logins: []string{c}}},
		},
		{
			name: "the application password changed", login: c, want: c, spec: newDefault, nodes: []string{"a"},
			held:  []model.AuthState{holds("a", spec, c, c)},
			fixes: []fix{{nodes: []string{"a"}, users: []string{"default"}, logins: []string{c}}},
		},
		{
			name: "an unreadable server is skipped, not guessed at", login: c, want: c, spec: spec, nodes: []string{"a", "b"},
			held:  []model.AuthState{holds("a", withoutApp, c, c), unreadable("b")},
			fixes: []fix{{nodes: []string{"a"}, users: []string{"app"}, logins: []string{c}}},
		},
		{
			name: "a replica's masterauth differs from the login", login: c, want: c, spec: spec, nodes: []string{"a", "b"},
			held:        []model.AuthState{holds("a", spec, c, c), holds("b", spec, d, c)},
			replication: []string{"b"},
		},
		{
			name: "rotation, first pass: the new password is added everywhere, then logged in with", login: c, want: d, spec: spec, nodes: []string{"a", "b"},
			held:        []model.AuthState{holds("a", spec, c, c), holds("b", spec, c, c)},
			fixes:       []fix{{nodes: []string{"a", "b"}, users: []string{"backup", "exporter", "operator", "replication"}, logins: []string{c, d}}},
			switchLogin: true,
		},
		{
			name: "rotation waits for a node that is not a ready server", login: c, want: d, spec: spec, nodes: []string{"a", "b", "starting"},
			held:       []model.AuthState{holds("a", spec, c, c), holds("b", spec, c, c, d)},
			fixes:      []fix{{nodes: []string{"a"}, users: []string{"backup", "exporter", "operator", "replication"}, logins: []string{c, d}}},
			waitingFor: "starting",
		},
		{
			name: "rotation waits for a server that cannot be read", login: c, want: d, spec: spec, nodes: []string{"a", "b"},
			held:       []model.AuthState{holds("a", spec, c, c, d), unreadable("b")},
			waitingFor: "b",
		},
		{
			name: "rotation, second pass: masterauth follows the login, the old password stays", login: d, want: d, spec: spec, nodes: []string{"a", "b"},
			held:        []model.AuthState{holds("a", spec, c, c, d), holds("b", spec, c, c, d)},
			replication: []string{"a", "b"},
		},
		{
			name: "rotation, third pass: every masterauth follows the login, the old password goes", login: d, want: d, spec: spec, nodes: []string{"a", "b"},
			held:    []model.AuthState{holds("a", spec, d, c, d), holds("b", spec, d, c, d)},
			fixes:   []fix{{nodes: []string{"a", "b"}, users: []string{"backup", "exporter", "operator", "replication"}, logins: []string{d}}},
			retired: true,
		},
		{
			name: "a server replicating as the operator moves to the replication user", login: c, want: c, spec: spec, nodes: []string{"a", "b"},
			held:        []model.AuthState{holds("a", spec, c, c), asOperator(holds("b", spec, c, c), c)},
			replication: []string{"b"},
		},
		{
			name: "while a node is unseen no server loses an operator password", login: d, want: d, spec: spec, nodes: []string{"a", "b", "new"},
			held:        []model.AuthState{holds("a", spec, c, c, d), holds("b", spec, c, c, d)},
			replication: []string{"a", "b"},
		},
		{
			name: "while a node is unseen an ACL edit keeps every operator password a server has", login: d, want: d, spec: spec, nodes: []string{"a", "new"},
			held:         []model.AuthState{holds("a", withoutApp, d, d, "older-pw")},
			fixes:        []fix{{nodes: []string{"a"}, users: []string{"app"}, logins: []string{d}}},
			acceptsExtra: []string{"older-pw"},
		},
		{
			name: "once every node is seen a stale operator password goes", login: d, want: d, spec: spec, nodes: []string{"a"},
			held:    []model.AuthState{holds("a", spec, d, d, "older-pw")},
			fixes:   []fix{{nodes: []string{"a"}, users: []string{"backup", "exporter", "operator", "replication"}, logins: []string{d}}},
			retired: true,
		},
		{
			name: "rotation, third pass: a server keeps the old exporter password its own exporter was started with", login: d, want: d, spec: spec, nodes: []string{"a", "b"},
			held:      []model.AuthState{holds("a", spec, d, c, d), holds("b", spec, d, c, d)},
			exporters: map[string]string{"a": exporterHash(c), "b": exporterHash(d)},
			fixes: []fix{
				{nodes: []string{"a"}, users: []string{"backup", "operator", "replication"}, logins: []string{d}, exporterKeeps: []string{c}},
				{nodes: []string{"b"}, users: []string{"backup", "exporter", "operator", "replication"}, logins: []string{d}},
			},
			retired: true,
		},
		{
			name: "converged: the kept exporter password stays while its exporter runs", login: d, want: d, spec: spec, nodes: []string{"a"},
			held:      []model.AuthState{exporterKeeps(holds("a", spec, d, d), c)},
			exporters: map[string]string{"a": exporterHash(c)},
		},
		{
			name: "its exporter gone (pod replaced), the old exporter password goes", login: d, want: d, spec: spec, nodes: []string{"a"},
			held:    []model.AuthState{exporterKeeps(holds("a", spec, d, d), c)},
			fixes:   []fix{{nodes: []string{"a"}, users: []string{"exporter"}, logins: []string{d}}},
			retired: true,
		},
		{
			name: "an annotation naming a password the server does not hold adds nothing", login: d, want: d, spec: spec, nodes: []string{"a"},
			held:      []model.AuthState{holds("a", spec, d, d)},
			exporters: map[string]string{"a": exporterHash("chosen-by-someone")},
		},
		{
			name: "operator upgrade: servers without the backup user get it live, and nothing else changes", login: c, want: c, spec: spec, nodes: []string{"a", "b"},
			held:  []model.AuthState{withoutBackup(holds("a", spec, c, c)), withoutBackup(holds("b", spec, c, c))},
			fixes: []fix{{nodes: []string{"a", "b"}, users: []string{"backup"}, logins: []string{c}}},
		},
		{
			name: "operator upgrade mid-rotation: the backup user arrives accepting both passwords", login: c, want: d, spec: spec, nodes: []string{"a"},
			held:        []model.AuthState{withoutBackup(holds("a", spec, c, c, d))},
			fixes:       []fix{{nodes: []string{"a"}, users: []string{"backup"}, logins: []string{c, d}}},
			switchLogin: true,
		},
		{
			name: "the Secret changed back mid-rotation: the record follows it", login: d, want: c, spec: spec, nodes: []string{"a"},
			held:        []model.AuthState{holds("a", spec, c, c, d)},
			replication: []string{"a"},
			switchLogin: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := planCredentials(tt.spec, tt.login, tt.want, tt.nodes, tt.held, tt.exporters)
			assert.Equal(t, tt.replication, nodeNames(plan.replication), "replication logins set")
			var fixes []fix
			for _, f := range plan.fixes {
				got := fix{nodes: nodeNames(f.nodes), users: f.users}
				users := f.spec.Expected()
				for _, l := range []string{c, d} {
					if slices.Contains(users[model.OperatorUser].Hashes, model.HashPassword(l)) {
						got.logins = append(got.logins, l)
					}
				}
				// The operator user accepts exactly the logins and the kept passwords; the
				// replication, exporter and backup users the passwords derived from the same ones, and
				// the exporter user also the one its own exporter keeps.
				var op, repl, exp, backup []string
				for _, pw := range append(slices.Clone(got.logins), tt.acceptsExtra...) {
					op = append(op, model.HashPassword(pw))
					repl = append(repl, model.HashPassword(model.ReplicationPassword(pw)))
					backup = append(backup, model.HashPassword(model.BackupPassword(pw)))
					exp = append(exp, exporterHash(pw))
				}
				for _, pw := range []string{c, d} {
					if h := exporterHash(pw); slices.Contains(users[model.ExporterUser].Hashes, h) && !slices.Contains(exp, h) {
						got.exporterKeeps = append(got.exporterKeeps, pw)
						exp = append(exp, h)
					}
				}
				assert.ElementsMatch(t, op, users[model.OperatorUser].Hashes, "operator user's passwords")
				assert.ElementsMatch(t, repl, users[model.ReplicationUser].Hashes, "replication user's passwords")
				assert.ElementsMatch(t, exp, users[model.ExporterUser].Hashes, "exporter user's passwords")
				assert.ElementsMatch(t, backup, users[model.BackupUser].Hashes, "backup user's passwords")
				assert.Equal(t, tt.spec.DefaultPassword, f.spec.DefaultPassword)
				assert.Equal(t, tt.login, f.spec.OperatorPassword, "the login is always accepted")
				fixes = append(fixes, got)
			}
			assert.Equal(t, tt.fixes, fixes, "ACL fixes")
			assert.Equal(t, tt.switchLogin, plan.switchLogin, "switch the login")
			assert.Equal(t, tt.retired, plan.retired, "a previous operator password retired")
			assert.Equal(t, tt.waitingFor, plan.waiting, "rotation waiting for")
		})
	}
}

// exporterHash is the hash of the exporter password derived from operator password pw, as a
// pod's AnnotationExporterPassword holds it.
func exporterHash(pw string) string {
	return model.HashPassword(model.ExporterPassword(pw))
}
