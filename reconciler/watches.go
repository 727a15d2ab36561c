package reconciler

import (
	"context"
	"fmt"
	"slices"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/resolve"
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// ControllerName names the controller (logs, metrics, Events' reporting controller).
const ControllerName = "valkeycluster"

// SetupWithManager registers the controller and its watches: the cluster itself; the objects
// it owns (ValkeyNodes, Service, Secrets, ConfigMaps, PodDisruptionBudgets, and Pods, which are owned by their
// ValkeyNode and so are mapped by label); and the shared objects it reads (ValkeyConfig,
// ValkeyImage, ValkeyRole, TLS Secrets), mapped to the clusters that use them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error { return r.setup(mgr, false) }

func (r *Reconciler) setup(mgr ctrl.Manager, skipNameValidation bool) error {
	names, err := NewSecretNames(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(names); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(views.NewClusterObject()).
		Owns(views.NewNodeObject()).
		Owns(&corev1.Service{}).
		Owns(&corev1.Secret{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&corev1.Pod{}, newPodEvents(&r.memory)).
		// A claim is owned by its node (or by no one, when retained), not by the cluster:
		// its cluster label says whose it is.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(labelledToCluster)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.nodeToClusters), builder.WithPredicates(maintenanceChanged())).
		WatchesRawSource(source.Kind[client.Object](names, SecretMetadata(), handler.EnqueueRequestsFromMapFunc(r.tlsSecretToClusters))).
		Watches(views.NewConfigObject(), handler.EnqueueRequestsFromMapFunc(r.configToClusters)).
		Watches(views.NewImageObject(), handler.EnqueueRequestsFromMapFunc(r.imageToClusters)).
		Watches(views.NewRoleObject(), handler.EnqueueRequestsFromMapFunc(r.roleToClusters)).
		// A backup starting or ending holds or releases the cluster's slot moves (backuphold.go).
		Watches(views.NewBackupObject(), handler.EnqueueRequestsFromMapFunc(backupToCluster), builder.WithPredicates(backupPhaseChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(skipNameValidation)}).
		Complete(r)
}

// SecretNames is a cache of its own, apart from the manager's, that holds the namespace and
// name of every Secret in the cluster and nothing else. A TLS Secret is the user's, without
// the operator's label, so the manager's label-filtered Secret cache never sees it; watching
// the names (a metadata-only watch, trimmed further on arrival) still wakes the clusters that
// use one when it changes, while its content is read with a direct GET only by the pass that
// needs it. So the operator keeps no copy of anyone's keys, and not even of their annotations
// (kubectl's last-applied-configuration of a Secret holds its data).
type SecretNames struct{ cache.Cache }

// GetCache has the manager run SecretNames with its own caches: started, and synced, before
// the controllers.
func (s SecretNames) GetCache() cache.Cache { return s.Cache }

// NewSecretNames builds the Secret-name cache; opts carry the manager's client settings.
func NewSecretNames(cfg *rest.Config, opts cache.Options) (SecretNames, error) {
	opts.DefaultTransform = nameOnly
	c, err := cache.New(cfg, opts)
	if err != nil {
		return SecretNames{}, fmt.Errorf("creating the Secret name cache: %w", err)
	}
	return SecretNames{c}, nil
}

// SecretMetadata is the metadata-only form of a Secret that SecretNames holds.
func SecretMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// nameOnly trims an object's metadata to its identity before the cache stores it.
func nameOnly(o any) (any, error) {
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return o, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
	}}, nil
}

// labelledToCluster maps an object the operator labelled (a pod, a data claim) to its cluster
// through the cluster label.
func labelledToCluster(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[render.LabelCluster]
	if name == "" || o.GetLabels()[render.LabelManagedBy] != render.ManagedBy {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// clustersWhere lists clusters (in namespace, or everywhere for "") matching pred.
func (r *Reconciler) clustersWhere(ctx context.Context, namespace string, pred func(views.Cluster) bool) []reconcile.Request {
	list := views.NewClusterListObject()
	if err := r.client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing ValkeyClusters for a watch event")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		c := views.Cluster{U: &list.Items[i]}
		if pred(c) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace(), Name: c.Name()}})
		}
	}
	return out
}

func (r *Reconciler) tlsSecretToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	return r.clustersWhere(ctx, o.GetNamespace(), func(c views.Cluster) bool {
		return c.TLSEnabled() && c.TLSSecretRef() == o.GetName()
	})
}

// references resolves (possibly partially) a cluster's config chain and image name.
func (r *Reconciler) references(ctx context.Context, c views.Cluster) resolve.Resolved {
	res, _ := resolve.Resolve(ctx, cacheLookup{r.client}, c.ConfigRef())
	return res
}

func (r *Reconciler) configToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	return r.clustersWhere(ctx, "", func(c views.Cluster) bool {
		return slices.Contains(r.references(ctx, c).Chain, o.GetName())
	})
}

func (r *Reconciler) imageToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	return r.clustersWhere(ctx, "", func(c views.Cluster) bool {
		return r.references(ctx, c).ImageName == o.GetName()
	})
}

func (r *Reconciler) roleToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	return r.clustersWhere(ctx, "", func(c views.Cluster) bool {
		return slices.Contains(c.RoleRefs(), o.GetName())
	})
}
