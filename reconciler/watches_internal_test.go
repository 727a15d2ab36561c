package reconciler

import (
	"context"
	"sort"
	"testing"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestWatchMapping checks that changes to shared objects reach exactly the clusters that use
// them: the whole baseRef chain, the image behind it, the roles named in spec.acl, the TLS
// Secret by name within the namespace, and pods through their cluster label.
func TestWatchMapping(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	for _, k := range []string{crds.KindCluster, crds.KindNode, crds.KindConfig, crds.KindImage, crds.KindRole} {
		scheme.AddKnownTypeWithName(crds.GVK(k), &unstructured.Unstructured{})
		scheme.AddKnownTypeWithName(crds.GVK(k+"List"), &unstructured.UnstructuredList{})
	}

	cfg := func(name, image, base string) client.Object {
		c := views.Config{U: views.NewConfigObject()}
		c.U.SetName(name)
		c.SetImageRef(image)
		c.SetBaseRef(base)
		return c.U
	}
	cluster := func(ns, name, configRef, tls string, roles ...string) client.Object {
		c := views.Cluster{U: views.NewClusterObject()}
		c.U.SetName(name)
		c.U.SetNamespace(ns)
		c.SetConfigRef(configRef)
		c.SetShards(1)
		c.SetTLSSecretRef(tls)
		var perms []views.ACLPermission
		for _, r := range roles {
			perms = append(perms, views.ACLPermission{RoleRef: r})
		}
		if len(perms) > 0 {
			c.SetACL([]views.ACLUser{{Username: "u", PasswordHashes: []string{"x"}, Permissions: perms}})
		}
		return c.U
	}
	img := views.Image{U: views.NewImageObject()}
	img.U.SetName("img-a")

	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		cfg("base", "img-a", ""), cfg("child", "", "base"), cfg("other", "img-b", ""),
		img.U,
		cluster("ns1", "uses-child", "child", "tls-1", "reader"),
		cluster("ns1", "uses-base", "base", ""),
		cluster("ns2", "uses-other", "other", "tls-1", "writer", "reader"),
		cluster("ns2", "missing-cfg", "not-yet", ""),
	).Build()
	r := New(c, nil, Options{Valkey: nil})
	ctx := context.Background()

	names := func(reqs []reconcile.Request) []string {
		var out []string
		for _, q := range reqs {
			out = append(out, q.Namespace+"/"+q.Name)
		}
		sort.Strings(out)
		return out
	}
	obj := func(name string) client.Object {
		o := &unstructured.Unstructured{}
		o.SetName(name)
		return o
	}
	secret := func(ns, name string) client.Object {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}

	tests := []struct {
		name string
		got  []reconcile.Request
		want []string
	}{
		{"base config reaches its whole chain", r.configToClusters(ctx, obj("base")), []string{"ns1/uses-base", "ns1/uses-child"}},
		{"child config", r.configToClusters(ctx, obj("child")), []string{"ns1/uses-child"}},
		{"config created later unblocks", r.configToClusters(ctx, obj("not-yet")), []string{"ns2/missing-cfg"}},
		{"image", r.imageToClusters(ctx, obj("img-a")), []string{"ns1/uses-base", "ns1/uses-child"}},
		{"missing image reached through its config", r.imageToClusters(ctx, obj("img-b")), []string{"ns2/uses-other"}},
		{"role", r.roleToClusters(ctx, obj("reader")), []string{"ns1/uses-child", "ns2/uses-other"}},
		{"TLS secret is per namespace", r.tlsSecretToClusters(ctx, secret("ns1", "tls-1")), []string{"ns1/uses-child"}},
		{"unrelated secret", r.tlsSecretToClusters(ctx, secret("ns1", "other")), nil},
		{"pod by label", labelledToCluster(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "uses-base-abcde",
			Labels: render.NodeLabels("uses-base", 0)}}), []string{"ns1/uses-base"}},
		{"foreign pod", labelledToCluster(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "x",
			Labels: map[string]string{render.LabelCluster: "uses-base"}}}), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, names(tc.got))
		})
	}
}
