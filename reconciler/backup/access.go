// What a backup reads before it starts: the store and its Secrets, the operator's login, the cluster's members.

package backup

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gomomento/valkey-operator/objectstore"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/tlscheck"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// openStore builds the object store client from a storage spec and its Secrets (OpenStore).
func (c *Controller) openStore(ctx context.Context, namespace string, s views.BackupStorage) (*objectstore.Store, string, error) {
	return OpenStore(ctx, c.reader, namespace, s)
}

// secretKeys reads keys of a user's Secret around the cache (SecretKeys).
func (c *Controller) secretKeys(ctx context.Context, namespace, name string, keys ...string) (map[string][]byte, string, error) {
	return SecretKeys(ctx, c.reader, namespace, name, keys...)
}

// operatorCredentials is how the operator logs in to the cluster's servers now: the
// password they were last moved onto, and the cluster's TLS when it has TLS.
func (c *Controller) operatorCredentials(ctx context.Context, cluster views.Cluster) (valkeyops.Credentials, string, error) {
	ns, name := cluster.U.GetNamespace(), cluster.U.GetName()
	s := &corev1.Secret{}
	err := c.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.AppliedAuthSecretName(name)}, s)
	if apierrors.IsNotFound(err) {
		err = c.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.AppliedAuthSecretName(name)}, s)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return valkeyops.Credentials{}, "cluster " + name + " has no recorded operator login yet", nil
		}
		return valkeyops.Credentials{}, "", err
	}
	pw := string(s.Data[render.AuthOperatorPasswordKey])
	if pw == "" {
		return valkeyops.Credentials{}, "cluster " + name + " has no recorded operator login yet", nil
	}
	creds := valkeyops.Credentials{Username: model.OperatorUser, Password: pw}
	if ref := cluster.TLSSecretRef(); ref != "" {
		data, msg, err := c.secretKeys(ctx, ns, ref, tlscheck.KeyCA, tlscheck.KeyCert, tlscheck.KeyKey)
		if err != nil || msg != "" {
			return valkeyops.Credentials{}, msg, err
		}
		creds.CA, creds.Cert, creds.Key = data[tlscheck.KeyCA], data[tlscheck.KeyCert], data[tlscheck.KeyKey]
		creds.ServerName = tlscheck.ServiceName(name, ns)
	}
	return creds, "", nil
}

// members lists the cluster's Active ValkeyNodes that have a pod address.
func (c *Controller) members(ctx context.Context, namespace, cluster string) ([]member, error) {
	l := views.NewNodeListObject()
	if err := c.client.List(ctx, l, client.InNamespace(namespace), client.MatchingLabels{render.LabelCluster: cluster}); err != nil {
		return nil, err
	}
	var out []member
	for i := range l.Items {
		n := views.Node{U: &l.Items[i]}
		st := n.Status()
		if st.Lifecycle == views.LifecycleActive && st.PodIP != "" {
			out = append(out, member{Name: n.Name(), Shard: n.Shard(), PodIP: st.PodIP})
		}
	}
	return out, nil
}

// observeSources reads the cluster's servers once, as the operator, and chooses the sources.
func observeSources(ctx context.Context, creds valkeyops.Credentials, members []member) ([]shardSource, error) {
	if len(members) == 0 {
		return nil, errors.New("the cluster has no Active member")
	}
	adm, err := valkeyops.NewAdmin(valkeyops.Options{Credentials: creds})
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	var nodes []model.Node
	for _, m := range members {
		nodes = append(nodes, m.node(render.ClientPort))
	}
	obsCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	snap, err := adm.Observe(obsCtx, nodes)
	if err != nil {
		return nil, err
	}
	return chooseSources(members, snap)
}
