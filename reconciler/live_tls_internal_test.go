package reconciler

import (
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCertRolloutSchedule drives the rollout's bookkeeping through passes at given times: when
// a node is reloaded, and when it counts as holding the Secret's content.
func TestCertRolloutSchedule(t *testing.T) {
	type pass struct {
		at     float64 // seconds after t0
		rev    string  // the Secret content seen by this pass
		node   string
		serves bool // the node serves the revision's certificate before any reload
		due    bool // want: the node is reloaded now
		after  bool // when reloaded: it serves the revision's certificate afterwards
		// want: the node is known to hold the revision after this pass
		current bool
	}
	tests := []struct {
		name       string
		passes     []pass
		wantReport bool // the rollout's completion is worth an Event (once every node is current)
	}{
		{name: "a node serving the first content seen is current and never reloaded", passes: []pass{
			{at: 0, rev: "A", node: "n1", serves: true, current: true},
			{at: 10, rev: "A", node: "n1", serves: true, current: true},
		}},
		{name: "a new certificate over stale files is retried after 1, 1, 2, 4, 4 s until the files are refreshed", wantReport: true, passes: []pass{
			{at: 0, rev: "A", node: "n1", serves: true, current: true},
			{at: 10, rev: "B", node: "n1", due: true},
			{at: 10.5, rev: "B", node: "n1"},
			{at: 11, rev: "B", node: "n1", due: true},
			{at: 12, rev: "B", node: "n1", due: true},
			{at: 13.9, rev: "B", node: "n1"},
			{at: 14, rev: "B", node: "n1", due: true},
			{at: 17.9, rev: "B", node: "n1"},
			{at: 18, rev: "B", node: "n1", due: true, after: true, current: true},
			{at: 19, rev: "B", node: "n1", serves: true, current: true},
		}},
		{name: "ca.crt alone: reloaded with a backoff and once after the refresh window, then left alone", wantReport: true, passes: []pass{
			{at: 0, rev: "A", node: "n1", serves: true, current: true},
			{at: 10, rev: "B", node: "n1", serves: true, due: true, after: true},
			{at: 10.9, rev: "B", node: "n1", serves: true},
			{at: 11, rev: "B", node: "n1", serves: true, due: true, after: true},
			{at: 13, rev: "B", node: "n1", serves: true, due: true, after: true},
			{at: 17, rev: "B", node: "n1", serves: true, due: true, after: true},
			{at: 25, rev: "B", node: "n1", serves: true, due: true, after: true},
			{at: 41, rev: "B", node: "n1", serves: true, due: true, after: true},
			{at: 73, rev: "B", node: "n1", serves: true, due: true, after: true},
			{at: 129.9, rev: "B", node: "n1", serves: true},
			{at: 130, rev: "B", node: "n1", serves: true, due: true, after: true, current: true},
			{at: 300, rev: "B", node: "n1", serves: true, current: true},
		}},
		{name: "a node first seen during a CA change is reloaded like the others", wantReport: true, passes: []pass{
			{at: 0, rev: "A", node: "n1", serves: true, current: true},
			{at: 10, rev: "B", node: "n2", serves: true, due: true, after: true},
		}},
		{name: "a node first seen serving another certificate is reloaded (operator restarted mid-rotation)", wantReport: true, passes: []pass{
			{at: 0, rev: "A", node: "n1", due: true, after: true, current: true},
		}},
		{name: "content changing again mid-rollout restarts the schedule", wantReport: true, passes: []pass{
			{at: 0, rev: "A", node: "n1", serves: true, current: true},
			{at: 10, rev: "B", node: "n1", due: true},
			{at: 10.5, rev: "C", node: "n1", due: true, after: true, current: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1_000_000, 0)
			ro := &certRollout{}
			for _, ps := range tc.passes {
				now := t0.Add(time.Duration(ps.at * float64(time.Second)))
				what := fmt.Sprintf("pass at %.1fs, content %s, node %s", ps.at, ps.rev, ps.node)
				ro.observe(ps.rev, now)
				due := ro.due(ps.node, ps.serves, now)
				require.Equal(t, ps.due, due, "%s: reloaded", what)
				if due {
					ro.reloaded(ps.node, ps.serves, ps.after, now)
				}
				assert.Equal(t, ps.current, ro.current(ps.node), "%s: current", what)
			}
			assert.Equal(t, tc.wantReport, ro.report())
		})
	}
}

// TestCertRolloutWaiting: the next pass is asked for when the earliest pending node is due;
// a node stale for longer than a kubelet may take is reported stalled; a failed reload is
// retried; departed nodes are forgotten.
func TestCertRolloutWaiting(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ro := &certRollout{}
	ro.observe("A", at(0))
	for _, n := range []string{"n1", "n2", "n3"} {
		require.False(t, ro.due(n, true, at(0)))
	}
	_, pending := ro.nextDue([]string{"n1", "n2", "n3"})
	assert.False(t, pending, "nothing to do at the baseline")

	ro.observe("B", at(10))
	for _, n := range []string{"n1", "n2", "n3"} {
		require.True(t, ro.due(n, false, at(10)))
	}
	ro.reloaded("n1", false, false, at(10)) // stale files: retry in 1 s
	ro.failed("n2", at(10))                 // CONFIG SET failed: retry in 1 s too
	ro.reloaded("n3", false, true, at(10))  // switched: done
	next, pending := ro.nextDue([]string{"n1", "n2", "n3"})
	require.True(t, pending)
	assert.Equal(t, at(11), next)
	assert.False(t, ro.stalled("n1", at(100)), "within the refresh window")
	assert.True(t, ro.stalled("n1", at(10).Add(tlsRefreshWindow+time.Second)), "past the refresh window")
	assert.False(t, ro.stalled("n3", at(1000)), "a current node never stalls")

	ro.prune(map[string]bool{"n3": true})
	_, pending = ro.nextDue([]string{"n1", "n2", "n3"})
	assert.False(t, pending, "departed nodes are forgotten")
	assert.True(t, ro.report(), "a change this process saw is worth an Event once complete")
}

func TestCertRetry(t *testing.T) {
	var got []time.Duration
	for k := 1; k <= 6; k++ {
		got = append(got, certRetry(k))
	}
	assert.Equal(t, []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}, got)
}

// TestTLSRevision: any of the three keys changes the revision; nothing else does.
func TestTLSRevision(t *testing.T) {
	base := map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k"), "ca.crt": []byte("a")}
	with := func(k, v string) map[string][]byte {
		d := map[string][]byte{}
		for kk, vv := range base {
			d[kk] = vv
		}
		d[k] = []byte(v)
		return d
	}
	tests := []struct {
		name string
		data map[string][]byte
		same bool
	}{
		{"same content", with("tls.crt", "c"), true},
		{"other key in the Secret", with("extra", "x"), true},
		{"tls.crt", with("tls.crt", "c2"), false},
		{"tls.key", with("tls.key", "k2"), false},
		{"ca.crt", with("ca.crt", "a2"), false},
		{"bytes moved between keys", map[string][]byte{"tls.crt": []byte("ck"), "tls.key": nil, "ca.crt": []byte("a")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.same, tlsRevision(base) == tlsRevision(tc.data))
		})
	}
}

// TestCertPlan: the certificates concern's decision for each member, from what the pass
// observed: a member going or mounting another Secret is left alone, one whose certificate
// could not be read is not reloaded, and a reload is planned only where it is due.
func TestCertPlan(t *testing.T) {
	oldCert := &x509.Certificate{Raw: []byte("old")}
	newCert := &x509.Certificate{Raw: []byte("new")}
	member := func(name string, edit func(*certMember)) certMember {
		m := certMember{node: model.Node{Name: name}, mounted: "tls", read: servedCertificate{cert: oldCert}, ok: true}
		if edit != nil {
			edit(&m)
		}
		return m
	}
	t0 := time.Unix(1_000_000, 0)
	ro := &certRollout{}
	ro.observe("A", t0)
	baseline := ro.plan([]certMember{member("n1", nil), member("n2", nil)}, "tls", oldCert, t0)
	for _, step := range baseline {
		require.Equal(t, certHeld, step.kind, "the first content seen is the baseline: %s", step.member.node.Name)
		require.True(t, step.serves)
	}

	ro.observe("B", t0.Add(time.Second))
	members := []certMember{
		member("n1", nil),
		member("n2", func(m *certMember) { m.read.cert = newCert }),
		member("going", func(m *certMember) { m.going, m.mounted = true, "" }),
		member("other", func(m *certMember) { m.mounted = "tls-old" }),
		member("untrusted", func(m *certMember) { m.read = servedCertificate{err: model.ErrUntrustedCertificate} }),
		member("unread", func(m *certMember) { m.ok = false }),
	}
	steps := ro.plan(members, "tls", newCert, t0.Add(time.Second))
	got := map[string]certStepKind{}
	for _, step := range steps {
		got[step.member.node.Name] = step.kind
	}
	assert.Equal(t, map[string]certStepKind{
		"n1": certReload, "n2": certReload, "going": certGoing, "other": certNotMounted,
		"untrusted": certUnread, "unread": certUnread,
	}, got)
	assert.False(t, steps[0].serves, "n1 serves the old certificate")
	assert.True(t, steps[1].serves, "n2 already serves the new one: its reload checks ca.crt")
}
