//go:build envtest

package reconciler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/stretchr/testify/assert"
)

// TestTLSInvalidRecovers covers every TLS failure kind with its exact message, the
// maintenance that continues while Invalid, and the automatic Invalid -> Creating -> Active
// recovery once the Secret is fixed in place.
func TestTLSInvalidRecovers(t *testing.T) {
	t.Parallel()
	type secretData = map[string][]byte
	tests := []struct {
		name    string
		break_  func(good testcerts.Bundle, ns string) (secretData, bool) // data, exists
		message string
	}{
		{name: "not found", message: `TLS Secret "tls" not found`,
			break_: func(testcerts.Bundle, string) (secretData, bool) { return nil, false }},
		{name: "missing tls.key", message: `TLS Secret "tls" missing required key "tls.key"`,
			break_: func(g testcerts.Bundle, _ string) (secretData, bool) {
				d := g.Data()
				delete(d, "tls.key")
				return d, true
			}},
		{name: "missing ca.crt", message: `TLS Secret "tls" missing required key "ca.crt"`,
			break_: func(g testcerts.Bundle, _ string) (secretData, bool) {
				d := g.Data()
				delete(d, "ca.crt")
				return d, true
			}},
		{name: "invalid tls.crt", message: `TLS Secret "tls" key "tls.crt" is not a valid PEM-encoded X.509 certificate`,
			break_: func(g testcerts.Bundle, _ string) (secretData, bool) {
				d := g.Data()
				d["tls.crt"] = []byte("not pem")
				return d, true
			}},
		{name: "invalid ca.crt", message: `TLS Secret "tls" key "ca.crt" is not a valid PEM-encoded X.509 certificate`,
			break_: func(g testcerts.Bundle, _ string) (secretData, bool) {
				d := g.Data()
				d["ca.crt"] = g.Key // PEM, but not a certificate
				return d, true
			}},
		{name: "invalid private key", message: `TLS Secret "tls" key "tls.key" is not a valid PEM-encoded private key`,
			break_: func(g testcerts.Bundle, _ string) (secretData, bool) {
				d := g.Data()
				d["tls.key"] = []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
				return d, true
			}},
		{name: "key mismatch", message: `TLS Secret "tls" private key does not match certificate`,
			break_: func(g testcerts.Bundle, _ string) (secretData, bool) {
				d := g.Data()
				d["tls.key"] = testcerts.OtherKey(t)
				return d, true
			}},
		{name: "missing service SAN", message: `TLS Secret "tls" certificate is missing SAN "c.%s.svc.cluster.local"`,
			break_: func(_ testcerts.Bundle, ns string) (secretData, bool) {
				return testcerts.New(t, testcerts.Options{DNSNames: []string{"*.c." + ns + ".svc.cluster.local"}}).Data(), true
			}},
		{name: "missing wildcard SAN", message: `TLS Secret "tls" certificate is missing SAN "*.c.%s.svc.cluster.local"`,
			break_: func(_ testcerts.Bundle, ns string) (secretData, bool) {
				return testcerts.New(t, testcerts.Options{DNSNames: []string{"c." + ns + ".svc.cluster.local"}}).Data(), true
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			good := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("c", ns)})
			data, present := tc.break_(good, ns)
			if present {
				require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Data: data}))
			}
			key := types.NamespacedName{Namespace: ns, Name: "c"}
			fake.block(key, true) // hold Creating after recovery so the test can see it
			createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 1, replicas: 0, tlsSecret: "tls"})

			want := tc.message
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, ns)
			}
			st := waitState(t, key, views.StateInvalid)
			assert.Equal(t, want, st.Message)
			waitEvent(t, key, corev1.EventTypeWarning, "InvalidTLSSecret", want)

			// While Invalid: Service, auth Secret and ACL ConfigMap are maintained, but no
			// topology action is taken.
			require.True(t, pollUntil(waitFor, func() bool {
				return exists(ns, "c", &corev1.Service{}) && exists(ns, "c-auth", &corev1.Secret{}) && exists(ns, "c-acl", &corev1.ConfigMap{})
			}))
			before := passes.of(key)
			require.True(t, pollUntil(waitFor, func() bool { return passes.of(key) > before+3 }))
			assert.Empty(t, listNodes(t, key), "no topology action while Invalid")
			assert.Equal(t, 0, fake.callCount(key), "Valkey is not touched while Invalid")
			assert.Equal(t, want, getCluster(t, key).Status().Message)

			// Fix the Secret in place: Creating with the message cleared, then Active.
			fixed := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Data: good.Data()}
			if present {
				cur := &corev1.Secret{}
				getObj(t, cur, ns, "tls")
				cur.Data = good.Data()
				require.NoError(t, k8s.Update(context.Background(), cur))
			} else {
				require.NoError(t, k8s.Create(context.Background(), fixed))
			}
			st = waitState(t, key, views.StateCreating)
			assert.Empty(t, st.Message, "message cleared on recovery")
			fake.block(key, false)
			st = waitState(t, key, views.StateActive)
			assert.Empty(t, st.Message)
			assert.Nil(t, st.Target)
			cred := fake.lastCredentials(key)
			require.True(t, cred.TLS(), "TLS cluster is dialled over TLS")
			assert.Equal(t, "c."+ns+".svc.cluster.local", cred.ServerName)
			assert.Equal(t, good.Data()["ca.crt"], cred.CA, "servers are verified against the cluster CA")
		})
	}
}

func exists(ns, name string, obj client.Object) bool {
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
	return err == nil
}

// TestActiveToInvalidAndBack: a formed cluster whose Secret breaks goes Invalid (any state
// -> Invalid) and recovers through Creating as a no-op: no new nodes, no second bootstrap,
// the generated passwords untouched.
func TestActiveToInvalidAndBack(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	good := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("c", ns)})
	require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Data: good.Data()}))
	key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 2, replicas: 1, tlsSecret: "tls"})
	waitState(t, key, views.StateActive)
	nodesBefore := names(listNodes(t, key))
	auth := &corev1.Secret{}
	getObj(t, auth, ns, "c-auth")
	boots := fake.bootstrapCount(key)

	sec := &corev1.Secret{}
	getObj(t, sec, ns, "tls")
	delete(sec.Data, "ca.crt")
	require.NoError(t, k8s.Update(context.Background(), sec))
	st := waitState(t, key, views.StateInvalid)
	assert.Equal(t, `TLS Secret "tls" missing required key "ca.crt"`, st.Message)

	getObj(t, sec, ns, "tls")
	sec.Data = good.Data()
	require.NoError(t, k8s.Update(context.Background(), sec))
	st = waitState(t, key, views.StateActive)
	assert.Empty(t, st.Message)
	assert.Nil(t, st.Target)
	assert.Equal(t, nodesBefore, names(listNodes(t, key)), "no new nodes")
	assert.Equal(t, boots, fake.bootstrapCount(key), "formed cluster passes bootstrap as a no-op")
	auth2 := &corev1.Secret{}
	getObj(t, auth2, ns, "c-auth")
	assert.Equal(t, auth.Data, auth2.Data, "passwords never regenerated")
	waitEvent(t, key, corev1.EventTypeNormal, "StateChanged", "Invalid -> Creating")
}

func names(nodes []views.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name())
	}
	return out
}

// TestExpiredCertificateHoldsANewCluster: a new cluster whose certificate has expired is not
// Invalid (expiry is a Warning), but it cannot form: real servers refuse an expired peer on the
// cluster bus (integration TestTLSExpiredCertificateStopsANewCluster), so the bootstrap is not
// tried, the cluster stays Creating and a Warning names the expiry. Renewing the certificate in
// place forms it. (What an Active cluster does when its certificate expires is proved on real
// servers: e2e TestCertificateExpiryOnALiveCluster.)
func TestExpiredCertificateHoldsANewCluster(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	notAfter := time.Now().Add(-time.Hour)
	expired := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("c", ns),
		NotBefore: time.Now().Add(-72 * time.Hour), NotAfter: notAfter})
	require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Data: expired.Data()}))
	key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 1, replicas: 1, tlsSecret: "tls"})
	waitEvent(t, key, corev1.EventTypeWarning, "CertificateExpired", `TLS Secret "tls" certificate expired`)
	waitEvent(t, key, corev1.EventTypeWarning, "BootstrapFailed",
		`bootstrap waits: the TLS certificate of Secret "tls" expired at `+notAfter.UTC().Format(time.RFC3339)+`; servers refuse an expired peer on the cluster bus`)
	before := passes.of(key)
	require.True(t, pollUntil(waitFor, func() bool { return passes.of(key) > before+3 }))
	st := getCluster(t, key).Status()
	assert.Equal(t, views.StateCreating, st.State, "not Invalid, and not formed")
	assert.Empty(t, st.Message)
	assert.Zero(t, fake.bootstrapCount(key), "no bootstrap is tried with an expired certificate")

	renewed := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("c", ns)})
	sec := &corev1.Secret{}
	getObj(t, sec, ns, "tls")
	sec.Data = renewed.Data()
	require.NoError(t, k8s.Update(context.Background(), sec))
	st = waitState(t, key, views.StateActive)
	assert.Empty(t, st.Message)
}
