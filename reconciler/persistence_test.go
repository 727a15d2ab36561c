//go:build envtest

package reconciler_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestPersistenceTheSchemaCannotSee: what a ValkeyConfig's schema cannot check across a
// baseRef chain is named in a Warning Event and the cluster waits in Creating, with no node
// made: a persistence directive in a base's spec.valkey under its child's persistence mode.
func TestPersistenceTheSchemaCannotSee(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	base := menu(t, ns, map[string]string{"appendonly": "yes"})
	withMode := func(name, baseRef string, p views.Persistence) string {
		c := views.Config{U: views.NewConfigObject()}
		c.U.SetName(name)
		c.SetBaseRef(baseRef)
		c.SetPersistence(p)
		require.NoError(t, k8s.Create(context.Background(), c.U))
		return name
	}
	conflict := withMode(ns+"-aof-over-appendonly", base, views.Persistence{Mode: views.PersistenceAOF, Size: "1Gi"})

	for _, tc := range []struct {
		name, config, message string
	}{
		{"a base's appendonly under its child's mode", conflict,
			`ValkeyConfig "` + base + `" sets appendonly in spec.valkey, but persistence mode AOF (from ValkeyConfig "` + conflict + `") sets it for the operator`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := createCluster(t, ns, tc.config[len(ns)+1:], tc.config, clusterOpts{shards: 1})
			waitEvent(t, key, corev1.EventTypeWarning, "ConfigUnresolved", tc.message)
			assert.Equal(t, views.StateCreating, getCluster(t, key).Status().State)
			assert.Empty(t, listNodes(t, key), "no node is made")
		})
	}
}

// TestDurableNodeVolumes: a durable node gets a data claim of its own before its pod, made
// only in a StorageClass that exists, and the claim follows the live config: reclaim (owned
// by the node, or unowned and labelled), a larger size where the class allows expansion, a
// Warning where it does not, and a Warning for a shrink the schema cannot see (through a
// baseRef chain).
func TestDurableNodeVolumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	createImage(t, ns+"-img", "valkey/valkey", "9.0.0", "9.0.0")
	class := ns + "-local"
	base := durableConfig(t, ns+"-base", ns+"-img", "", views.Persistence{Mode: views.PersistenceAOF, Size: "1Gi", StorageClassName: class})
	child := durableConfig(t, ns+"-child", "", base, views.Persistence{})
	key := createCluster(t, ns, "durable", child, clusterOpts{shards: 2})

	outer := t
	t.Run("a StorageClass that does not exist holds the nodes back", func(t *testing.T) {
		waitEvent(t, key, corev1.EventTypeWarning, "StorageClassMissing", `StorageClass "`+class+`" of spec.persistence.storageClassName does not exist`)
		assert.Empty(t, listPods(t, key), "no pod is made before its claim")
		storageClass(outer, class, true)
		waitState(t, key, views.StateActive)
	})

	claims := func(t *testing.T) map[string]corev1.PersistentVolumeClaim {
		t.Helper()
		out := map[string]corev1.PersistentVolumeClaim{}
		for _, n := range listNodes(t, key) {
			c := corev1.PersistentVolumeClaim{}
			getObj(t, &c, ns, n.Name()+"-data")
			out[n.Name()] = c
		}
		return out
	}
	t.Run("every node has its own claim, mounted by its pod", func(t *testing.T) {
		nodes := listNodes(t, key)
		require.Len(t, nodes, 2)
		for _, n := range nodes {
			c := claims(t)[n.Name()]
			assert.True(t, metav1.IsControlledBy(&c, n.U), "claim %s is owned by its node (reclaim Delete)", c.Name)
			assert.Equal(t, "Delete", c.Labels["valkey.gomomento.com/reclaim"])
			assert.Equal(t, n.Name(), c.Labels["valkey.gomomento.com/node"])
			assert.Equal(t, string(n.U.GetUID()), c.Annotations["valkey.gomomento.com/node-uid"])
			assert.Equal(t, "1Gi", ptr.To(c.Spec.Resources.Requests[corev1.ResourceStorage]).String())
			assert.Equal(t, class, ptr.Deref(c.Spec.StorageClassName, ""))
			assert.Empty(t, c.Spec.VolumeName, "a claim binds only a volume provisioned for it")
			pod := corev1.Pod{}
			getObj(t, &pod, ns, n.Name())
			i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" })
			require.GreaterOrEqual(t, i, 0)
			require.NotNil(t, pod.Spec.Volumes[i].PersistentVolumeClaim, "the data volume is the claim, not an emptyDir")
			assert.Equal(t, c.Name, pod.Spec.Volumes[i].PersistentVolumeClaim.ClaimName)
		}
	})

	t.Run("reclaim Retain unowns the claims and labels them", func(t *testing.T) {
		editConfig(t, child, func(c views.Config) { c.SetPersistence(views.Persistence{Reclaim: views.ReclaimRetain}) })
		require.True(t, pollUntil(waitFor, func() bool {
			for _, c := range claims(t) {
				if len(c.OwnerReferences) > 0 || c.Labels["valkey.gomomento.com/reclaim"] != "Retain" {
					return false
				}
			}
			return true
		}), "every claim unowned and labelled Retain")
	})

	t.Run("a larger size is requested where the class allows expansion", func(t *testing.T) {
		// envtest runs no volume binder: the test binds the claims as one would (only a
		// bound claim's request may grow; the API server refuses it before).
		for _, c := range claims(t) {
			c.Status.Phase = corev1.ClaimBound
			c.Status.Capacity = c.Spec.Resources.Requests
			require.NoError(t, k8s.Status().Update(ctx, &c))
		}
		editConfig(t, base, func(c views.Config) {
			p := c.Persistence()
			p.Size = "2Gi"
			c.SetPersistence(p)
		})
		require.True(t, pollUntil(waitFor, func() bool {
			for _, c := range claims(t) {
				if ptr.To(c.Spec.Resources.Requests[corev1.ResourceStorage]).String() != "2Gi" {
					return false
				}
			}
			return true
		}), "every claim requests 2Gi")
		waitEvent(t, key, corev1.EventTypeNormal, "VolumeExpanding", "to 2Gi")
	})

	t.Run("a class without expansion is named in a Warning", func(t *testing.T) {
		sc := &storagev1.StorageClass{}
		getObj(t, sc, "", class)
		sc.AllowVolumeExpansion = ptr.To(false)
		require.NoError(t, k8s.Update(ctx, sc))
		editConfig(t, base, func(c views.Config) {
			p := c.Persistence()
			p.Size = "3Gi"
			c.SetPersistence(p)
		})
		waitEvent(t, key, corev1.EventTypeWarning, "VolumeExpansionUnsupported", `StorageClass "`+class+`" does not allow volume expansion`)
		for _, c := range claims(t) {
			assert.Equal(t, "2Gi", ptr.To(c.Spec.Resources.Requests[corev1.ResourceStorage]).String(), "claim %s keeps its size", c.Name)
		}
	})

	t.Run("a shrink through the baseRef chain is refused", func(t *testing.T) {
		editConfig(t, child, func(c views.Config) {
			c.SetPersistence(views.Persistence{Reclaim: views.ReclaimRetain, Size: "1Gi"})
		})
		waitEvent(t, key, corev1.EventTypeWarning, "VolumeShrinkRefused", "spec.persistence.size is 1Gi, smaller than these nodes' volumes")
		for _, c := range claims(t) {
			assert.Equal(t, "2Gi", ptr.To(c.Spec.Resources.Requests[corev1.ResourceStorage]).String(), "claim %s keeps its size", c.Name)
		}
	})
}

// durableConfig creates a ValkeyConfig with spec.persistence p.
func durableConfig(t *testing.T, name, imageRef, baseRef string, p views.Persistence) string {
	t.Helper()
	c := views.Config{U: views.NewConfigObject()}
	c.U.SetName(name)
	c.SetImageRef(imageRef)
	c.SetBaseRef(baseRef)
	c.SetPersistence(p)
	require.NoError(t, k8s.Create(context.Background(), c.U))
	return name
}

// editConfig applies mutate to the live ValkeyConfig name, retrying on conflicts.
func editConfig(t *testing.T, name string, mutate func(views.Config)) {
	t.Helper()
	require.Eventually(t, func() bool {
		c := views.Config{U: views.NewConfigObject()}
		require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: name}, c.U))
		mutate(c)
		err := k8s.Update(context.Background(), c.U)
		return err == nil || !apierrors.IsConflict(err) && assertNoErr(t, err)
	}, waitFor, tick)
}

// storageClass creates a StorageClass (removed when the test ends).
func storageClass(t *testing.T, name string, expandable bool) {
	t.Helper()
	sc := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: name},
		Provisioner:          "test.valkey.gomomento.com/none",
		AllowVolumeExpansion: ptr.To(expandable),
	}
	require.NoError(t, k8s.Create(context.Background(), sc))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), sc) })
}
