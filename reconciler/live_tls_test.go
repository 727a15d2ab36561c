//go:build envtest

package reconciler_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// certIssuer signs the TLS Secret contents of one test's cluster "c" in namespace ns.
type certIssuer struct {
	t  *testing.T
	ns string
}

// bundle returns Secret data with a leaf of serial signed by ca and the CA bundle caPEM.
func (ci certIssuer) bundle(ca *testcerts.CA, serial int64, caPEM []byte) map[string][]byte {
	ci.t.Helper()
	p, err := ca.Issue(testcerts.Leaf{CommonName: "valkey", DNSNames: testcerts.ForCluster("c", ci.ns), Server: true, Client: true, Serial: serial})
	require.NoError(ci.t, err)
	return map[string][]byte{"tls.crt": p.CertPEM, "tls.key": p.KeyPEM, "ca.crt": caPEM}
}

func newCA(t *testing.T, name string) *testcerts.CA {
	t.Helper()
	ca, err := testcerts.NewCA(name)
	require.NoError(t, err)
	return ca
}

// setSecretData replaces the data of Secret ns/name, retrying on conflicts.
func setSecretData(t *testing.T, ns, name string, data map[string][]byte) {
	t.Helper()
	require.Eventually(t, func() bool {
		s := &corev1.Secret{}
		getObj(t, s, ns, name)
		s.Data = data
		err := k8s.Update(context.Background(), s)
		return err == nil || !apierrors.IsConflict(err) && assertNoErr(t, err)
	}, waitFor, tick)
}

// servedSerials maps each of the cluster's ValkeyNodes to the serial of the certificate its
// fake server serves ("" while it has not been looked at).
func servedSerials(t *testing.T, key types.NamespacedName) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range listNodes(t, key) {
		out[n.Name()] = ""
		if cert, ok := fake.certs.served(key, n.Name()); ok {
			chain, err := parseChain(cert)
			require.NoError(t, err)
			out[n.Name()] = chain[0].SerialNumber.String()
		}
	}
	return out
}

// waitServed waits until every node of the cluster serves serial and returns how long that took.
func waitServed(t *testing.T, key types.NamespacedName, serial string) time.Duration {
	t.Helper()
	start := time.Now()
	var last map[string]string
	ok := pollUntil(waitFor, func() bool {
		last = servedSerials(t, key)
		for _, s := range last {
			if s != serial {
				return false
			}
		}
		return len(last) > 0
	})
	require.True(t, ok, "every node serves serial %s; last %v", serial, last)
	return time.Since(start)
}

// podUIDs maps the cluster's pods to their UIDs: a restarted or replaced pod changes it.
func podUIDs(t *testing.T, key types.NamespacedName) map[string]types.UID {
	t.Helper()
	out := map[string]types.UID{}
	for _, p := range listPods(t, key) {
		out[p.Name] = p.UID
	}
	return out
}

// warnings lists the notes of Warning Events about the cluster with reason.
func warnings(t *testing.T, key types.NamespacedName, reason string) []string {
	t.Helper()
	l := &eventsv1.EventList{}
	require.NoError(t, k8s.List(context.Background(), l, client.InNamespace(key.Namespace)))
	var out []string
	for _, e := range l.Items {
		if e.Regarding.Name == key.Name && e.Regarding.Kind == crds.KindCluster && e.Type == corev1.EventTypeWarning && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// quiet waits for a few more passes of the cluster and checks they sent Valkey no write.
func quiet(t *testing.T, key types.NamespacedName, what string) {
	t.Helper()
	writes, before := fake.writeCount(key), passes.of(key)
	require.True(t, pollUntil(waitFor, func() bool { return passes.of(key) > before+3 }))
	assert.Equal(t, writes, fake.writeCount(key), "no Valkey write once %s", what)
}

// TestCertificateRotationReloadsEveryNode: a certificate re-issued by the same CA is reloaded
// on every node without replacing anything. While the pods' volumes still hold the old files
// (the kubelet has not refreshed them) the reloads change nothing and no Warning is raised;
// once they are refreshed every node serves the new certificate, the rotation is an Event,
// and the converged cluster goes back to sending no write.
func TestCertificateRotationReloadsEveryNode(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ci, ca := certIssuer{t, ns}, newCA(t, "rotation CA")
	require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Data: ci.bundle(ca, 100, ca.CertPEM)}))
	key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 2, replicas: 1, tlsSecret: "tls"})
	waitState(t, key, views.StateActive)
	waitServed(t, key, "100")
	nodes, pods := names(listNodes(t, key)), podUIDs(t, key)
	require.Len(t, nodes, 4)
	quiet(t, key, "every node serves the Secret's certificate")
	_, reloads := fake.certs.reloadCount(key)
	assert.Zero(t, reloads, "a node serving the Secret's certificate is not reloaded")

	fake.certs.freeze(key) // the kubelet has not refreshed the volumes yet
	setSecretData(t, ns, "tls", ci.bundle(ca, 200, ca.CertPEM))
	require.True(t, pollUntil(waitFor, func() bool {
		per, _ := fake.certs.reloadCount(key)
		for _, n := range nodes {
			if per[n] < 2 {
				return false
			}
		}
		return true
	}), "every node is reloaded, and retried, while its volume is stale")
	for n, s := range servedSerials(t, key) {
		assert.Equal(t, "100", s, "%s still serves the old certificate: its files are old", n)
	}
	assert.Empty(t, warnings(t, key, "CertificateNotServed"), "waiting for a kubelet is no Warning")
	assert.Empty(t, warnings(t, key, "CertificateReloadFailed"))

	fake.certs.thaw(key)
	took := waitServed(t, key, "200")
	t.Logf("every node serves the re-issued certificate %s after the volumes were refreshed", took.Round(time.Millisecond))
	waitEvent(t, key, corev1.EventTypeNormal, "CertificateRotated", `serves certificate serial 200 of TLS Secret "tls"`)
	assert.Equal(t, nodes, names(listNodes(t, key)), "same ValkeyNodes")
	assert.Equal(t, pods, podUIDs(t, key), "same pods")
	assert.Equal(t, views.StateActive, getCluster(t, key).Status().State)
	quiet(t, key, "the rotation is complete")
}

// TestInvalidTLSSecretReloadsNothing: a re-issued certificate whose key does not match makes
// the cluster Invalid with the exact message, and nothing is reloaded from it; fixed, the
// cluster returns to Active and the valid certificate is rolled out.
func TestInvalidTLSSecretReloadsNothing(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ci, ca := certIssuer{t, ns}, newCA(t, "invalid CA")
	require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Data: ci.bundle(ca, 100, ca.CertPEM)}))
	key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 1, replicas: 1, tlsSecret: "tls"})
	waitState(t, key, views.StateActive)
	waitServed(t, key, "100")

	broken := ci.bundle(ca, 300, ca.CertPEM)
	broken["tls.key"] = testcerts.OtherKey(t)
	setSecretData(t, ns, "tls", broken)
	st := waitState(t, key, views.StateInvalid)
	assert.Equal(t, `TLS Secret "tls" private key does not match certificate`, st.Message)
	before := passes.of(key)
	require.True(t, pollUntil(waitFor, func() bool { return passes.of(key) > before+3 }))
	_, reloads := fake.certs.reloadCount(key)
	assert.Zero(t, reloads, "nothing is reloaded from a Secret that fails validation")
	for n, s := range servedSerials(t, key) {
		assert.Equal(t, "100", s, n)
	}

	setSecretData(t, ns, "tls", ci.bundle(ca, 300, ca.CertPEM))
	waitState(t, key, views.StateActive)
	waitServed(t, key, "300")
}

// TestCABundleRotation walks a CA change: ca.crt first gains the new CA next to the old one
// (the served certificate does not change, yet every node must reload to trust the new CA),
// then the certificate is re-issued by the new CA, then the old CA is dropped. Every step is
// loaded by every node, and the operator keeps connecting throughout.
func TestCABundleRotation(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ci, oldCA, nextCA := certIssuer{t, ns}, newCA(t, "old CA"), newCA(t, "new CA")
	first := ci.bundle(oldCA, 100, oldCA.CertPEM)
	require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Data: first}))
	key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 1, replicas: 1, tlsSecret: "tls"})
	waitState(t, key, views.StateActive)
	waitServed(t, key, "100")
	nodes := names(listNodes(t, key))

	trustedEverywhere := func(ca []byte) func() bool {
		return func() bool {
			for _, n := range nodes {
				if !bytes.Equal(fake.certs.trusted(key, n), ca) {
					return false
				}
			}
			return true
		}
	}
	both := append(append([]byte(nil), oldCA.CertPEM...), nextCA.CertPEM...)
	withBundle := map[string][]byte{"tls.crt": first["tls.crt"], "tls.key": first["tls.key"], "ca.crt": both}
	setSecretData(t, ns, "tls", withBundle)
	require.True(t, pollUntil(waitFor, trustedEverywhere(both)), "every node reloads ca.crt although its certificate is unchanged")
	for n, s := range servedSerials(t, key) {
		assert.Equal(t, "100", s, n)
	}

	second := ci.bundle(nextCA, 200, both)
	setSecretData(t, ns, "tls", second)
	waitServed(t, key, "200")
	second["ca.crt"] = nextCA.CertPEM
	setSecretData(t, ns, "tls", second)
	require.True(t, pollUntil(waitFor, trustedEverywhere(nextCA.CertPEM)), "the old CA is dropped everywhere")
	assert.Equal(t, views.StateActive, getCluster(t, key).Status().State)
	assert.Empty(t, warnings(t, key, "CertificateUntrusted"), "the operator trusted every node throughout")
	assert.Equal(t, nodes, names(listNodes(t, key)))
}
