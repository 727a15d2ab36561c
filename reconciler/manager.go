package reconciler

import (
	"context"
	"fmt"
	"time"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/reconciler/backup"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/settings"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ManagerConfig configures NewManager.
type ManagerConfig struct {
	// Namespace is the operator's own namespace: the settings ConfigMap and the leader lease.
	Namespace string
	// LeaderElection turns on leader election (a Lease in Namespace).
	LeaderElection   bool
	LeaderElectionID string
	// MetricsAddr and ProbeAddr are bind addresses; "0" disables the endpoint.
	MetricsAddr string
	ProbeAddr   string
	// PprofAddr serves net/http/pprof (empty or "0" = off, the default).
	PprofAddr string
	// SyncPeriod is the informer resync period (0 = controller-runtime's default).
	SyncPeriod      time.Duration
	RecheckInterval time.Duration
	PollInterval    time.Duration
	ActivePeriod    time.Duration
	// SlowStart is how long a new pod may take to turn ready before a warning (0 = plan.SlowStart).
	SlowStart time.Duration
	Valkey    Valkey
	// Metrics receives one call per reconcile pass (nil = none).
	Metrics Metrics
	// SkipNameValidation allows several managers with this controller in one process
	// (tests only: controller names must otherwise be unique for their metrics).
	SkipNameValidation bool
	// GracefulShutdownTimeout bounds how long running reconciles may take on stop (0 = default).
	GracefulShutdownTimeout time.Duration
	// RestoreImage is the image a restoring cluster's pods run to fetch their snapshot: the
	// operator's own. Empty: read from the operator's pod (PodName in Namespace), if any.
	RestoreImage string
	// PodName is the operator's own pod, when it runs in one ($POD_NAME).
	PodName string
	// BackupTransfers bounds the shard transfers of backups running at once (0 = backup.DefaultTransfers).
	BackupTransfers int
	// BackupTimeout fails a backup Running longer than this (0 = backup.DefaultTimeout).
	BackupTimeout time.Duration
}

// EventReporter is the reporting controller name on the operator's Events.
const EventReporter = "valkey-operator"

// NewManager builds the controller-runtime manager with the ValkeyCluster controller. It
// reads the operator settings first, with a direct (uncached) client, so an invalid
// valkey-operator-config stops start-up with a clear error (a *settings.InvalidError).
func NewManager(ctx context.Context, cfg *rest.Config, mc ManagerConfig) (ctrl.Manager, *Reconciler, error) {
	if mc.Valkey == nil {
		return nil, nil, fmt.Errorf("no Valkey connector configured")
	}
	if mc.Namespace == "" {
		return nil, nil, fmt.Errorf("the operator namespace is not set (POD_NAMESPACE or --namespace)")
	}
	direct, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("creating API client: %w", err)
	}
	st, err := settings.Load(ctx, direct, mc.Namespace)
	if err != nil {
		return nil, nil, fmt.Errorf("operator settings: %w", err)
	}
	if err := checkCRDs(direct); err != nil {
		return nil, nil, err
	}

	if mc.RestoreImage == "" && mc.PodName != "" {
		if mc.RestoreImage, err = ownImage(ctx, direct, mc.Namespace, mc.PodName); err != nil {
			return nil, nil, err
		}
	}
	if mc.LeaderElectionID == "" {
		mc.LeaderElectionID = "valkey-operator-leader"
	}
	managed := labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.ManagedBy})
	copts := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			// Only the operator's own pods, Services, ConfigMaps and Secrets. TLS Secrets are
			// the users' own: a pass reads the one it needs directly, and a cache of Secret
			// names alone wakes the clusters that use one when it changes (watches.go).
			&corev1.Pod{}:                   {Label: managed},
			&corev1.Service{}:               {Label: managed},
			&corev1.ConfigMap{}:             {Label: managed},
			&corev1.Secret{}:                {Label: managed},
			&policyv1.PodDisruptionBudget{}: {Label: managed},
			&corev1.PersistentVolumeClaim{}: {Label: managed},
			// Only whether a node is in maintenance (maintenance.go).
			&corev1.Node{}: {Transform: nodeSchedulingOnly},
		},
		DefaultTransform: stripManagedFields,
	}
	if mc.SyncPeriod > 0 {
		copts.SyncPeriod = &mc.SyncPeriod
	}
	var graceful *time.Duration
	if mc.GracefulShutdownTimeout > 0 {
		graceful = &mc.GracefulShutdownTimeout
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		GracefulShutdownTimeout:       graceful,
		Scheme:                        clientgoscheme.Scheme,
		Metrics:                       metricsserver.Options{BindAddress: mc.MetricsAddr},
		HealthProbeBindAddress:        mc.ProbeAddr,
		PprofBindAddress:              mc.PprofAddr,
		LeaderElection:                mc.LeaderElection,
		LeaderElectionID:              mc.LeaderElectionID,
		LeaderElectionNamespace:       mc.Namespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         copts,
		// Serve unstructured reads from the informer cache too (off by default).
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating manager: %w", err)
	}
	if mc.ProbeAddr != "" && mc.ProbeAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return nil, nil, err
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return nil, nil, err
		}
	}
	r := New(mgr.GetClient(), mgr.GetAPIReader(), Options{
		Settings:        st,
		Valkey:          mc.Valkey,
		Metrics:         mc.Metrics,
		Recorder:        mgr.GetEventRecorder(EventReporter),
		RecheckInterval: mc.RecheckInterval,
		PollInterval:    mc.PollInterval,
		ActivePeriod:    mc.ActivePeriod,
		SlowStart:       mc.SlowStart,
		RestoreImage:    mc.RestoreImage,
	})
	if err := r.setup(mgr, mc.SkipNameValidation); err != nil {
		return nil, nil, fmt.Errorf("setting up controller: %w", err)
	}
	bopts := backup.Options{Recorder: mgr.GetEventRecorder(EventReporter), Transfers: mc.BackupTransfers, Timeout: mc.BackupTimeout}
	if m, ok := mc.Metrics.(backup.Metrics); ok {
		bopts.Metrics = m
	}
	if err := backup.Setup(ctx, mgr, bopts, mc.SkipNameValidation); err != nil {
		return nil, nil, fmt.Errorf("setting up the backup controller: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("operator settings", "defaultZoneSpread", st.DefaultZoneSpread)
	return mgr, r, nil
}

// ownImage is the image of the operator's own container (the pod's first): what a
// restoring cluster's pods run to fetch their snapshot, so that the fetcher is always the
// operator's version, whatever registry or tag an install uses.
func ownImage(ctx context.Context, c client.Reader, namespace, pod string) (string, error) {
	p := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: pod}, p); err != nil {
		return "", fmt.Errorf("reading the operator's own pod %s/%s for its image: %w", namespace, pod, err)
	}
	if len(p.Spec.Containers) == 0 {
		return "", fmt.Errorf("the operator's own pod %s/%s has no container", namespace, pod)
	}
	return p.Spec.Containers[0].Image, nil
}

// stripManagedFields drops managedFields from cached objects, often the larger part of a pod
// or a custom resource, which nothing here reads. The kinds the operator keeps in shape with
// server-side apply (and PodDisruptionBudgets) keep theirs: apply (apply.go) extracts the fields it owns from them.
func stripManagedFields(o any) (any, error) {
	switch o.(type) {
	case *corev1.Secret, *corev1.Service, *corev1.ConfigMap, *policyv1.PodDisruptionBudget:
		return o, nil
	}
	if m, err := meta.Accessor(o); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return o, nil
}

// checkCRDs fails fast with a clear message when the embedded CRDs are not installed.
func checkCRDs(c client.Client) error {
	defs, err := crds.Definitions()
	if err != nil {
		return err
	}
	for _, d := range defs {
		gvk := crds.GVK(d.Spec.Names.Kind)
		if _, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return fmt.Errorf("CustomResourceDefinition %s is not installed (kubectl apply -f crds/): %w", d.Name, err)
		}
	}
	return nil
}
