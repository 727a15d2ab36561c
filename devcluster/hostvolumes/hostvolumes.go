// Package hostvolumes is the dev cluster's storage: a default StorageClass and the
// provisioner behind it, which runs in the nodes process on the Docker host.
//
// A claim of the class gets, once the scheduler has picked its pod's node
// (WaitForFirstConsumer), an ext4 image of the requested size loop-mounted under the state
// directory and a `local` PersistentVolume pinned to that node, pre-bound to the claim so
// the control plane's PV controller binds the two. Released volumes are deleted with their
// image, and a claim asking for more than its volume has is grown online. Sizes are real:
// a full volume fails writes with ENOSPC, as a cloud disk does.
package hostvolumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

const (
	// ClassName is the dev cluster's default StorageClass.
	ClassName = "valkey-dev-local"
	// ProvisionerName is the class's provisioner: this package.
	ProvisionerName = "dev.valkey.gomomento.com/hostvolume"

	annProvisionedBy          = "pv.kubernetes.io/provisioned-by"
	annSelectedNode           = "volume.kubernetes.io/selected-node"
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	annDefaultClass           = "storageclass.kubernetes.io/is-default-class"

	// maxRetryDelay caps the back-off of a failing claim or volume (client-go's default
	// limiter grows to minutes, too slow for a developer watching a pod start).
	maxRetryDelay = 5 * time.Second

	mib = 1 << 20
	// minSize keeps an image large enough for ext4 and a little data; smaller requests get
	// this much (the volume's capacity says so).
	minSize = 16 * mib
)

// StorageClass is the dev cluster's default class. WaitForFirstConsumer lets the scheduler
// place the pod first, so the volume is made on the pod's node.
func StorageClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: ClassName, Annotations: map[string]string{annDefaultClass: "true"}},
		Provisioner:          ProvisionerName,
		ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		AllowVolumeExpansion: ptr.To(true),
	}
}

// Config is what the provisioner needs.
type Config struct {
	Kube kubernetes.Interface
	// Dir holds one directory per volume (<state>/volumes).
	Dir    string
	Logger *slog.Logger // required
}

// roundSize is the image size for a request: whole MiB, at least minSize.
func roundSize(bytes int64) int64 {
	return max(minSize, (bytes+mib-1)/mib*mib)
}

func (c Config) diskOf(pvName string) disk { return disk{dir: filepath.Join(c.Dir, pvName)} }

// ours reports whether pv was made here, with its backing where this provisioner put it.
func (c Config) ours(pv *corev1.PersistentVolume) bool {
	return pv.Annotations[annProvisionedBy] == ProvisionerName && pv.Spec.Local != nil &&
		pv.Spec.Local.Path == c.diskOf(pv.Name).MountPath()
}

// Remount mounts the image of every volume this provisioner made that is not mounted (after
// a reboot of the host, say). The nodes process calls it before its pods start, so no pod
// binds an empty mount point where its data should be.
func Remount(ctx context.Context, cfg Config) error {
	list, err := cfg.Kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list persistent volumes: %w", err)
	}
	var errs []error
	for i := range list.Items {
		pv := &list.Items[i]
		if d := cfg.diskOf(pv.Name); cfg.ours(pv) && d.hasImage() {
			if err := d.mount(); err != nil {
				errs = append(errs, fmt.Errorf("volume %s: %w", pv.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// controller provisions, grows and deletes the class's volumes.
type controller struct {
	Config
	claims   corelisters.PersistentVolumeClaimLister
	volumes  corelisters.PersistentVolumeLister
	classes  storagelisters.StorageClassLister
	recorder record.EventRecorder
	queue    workqueue.TypedRateLimitingInterface[item]
}

// item is one object to reconcile: a claim (namespace and name) or a volume (name only).
type item struct {
	claim bool
	key   types.NamespacedName
}

// Run provisions until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	factory := informers.NewSharedInformerFactory(cfg.Kube, 0)
	claimInf := factory.Core().V1().PersistentVolumeClaims()
	volInf := factory.Core().V1().PersistentVolumes()
	classInf := factory.Storage().V1().StorageClasses()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Kube.CoreV1().Events("")})
	c := &controller{
		Config: cfg,
		claims: claimInf.Lister(), volumes: volInf.Lister(), classes: classInf.Lister(),
		recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: ProvisionerName}),
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[item](200*time.Millisecond, maxRetryDelay)),
	}
	defer c.queue.ShutDown()
	enqueue := func(claim bool) func(obj any) {
		return func(obj any) {
			if m, ok := obj.(metav1.Object); ok {
				c.queue.Add(item{claim: claim, key: types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}})
			}
		}
	}
	for _, h := range []struct {
		inf   cache.SharedIndexInformer
		claim bool
	}{{claimInf.Informer(), true}, {volInf.Informer(), false}} {
		add := enqueue(h.claim)
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) },
		}); err != nil {
			return err
		}
	}
	_ = classInf.Informer() // registered before Start, so the lister has a cache
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("hostvolumes: %v cache did not sync: %w", typ, ctx.Err())
		}
	}
	cfg.Logger.Info("volume provisioner running", "provisioner", ProvisionerName, "dir", cfg.Dir)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.next(ctx) {
	}
	return nil
}

// next handles one queued item; false once the queue is shut down.
func (c *controller) next(ctx context.Context) bool {
	it, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(it)
	var err error
	if it.claim {
		err = c.syncClaim(ctx, it.key)
	} else {
		err = c.syncVolume(ctx, it.key.Name)
	}
	if err != nil && ctx.Err() == nil {
		c.Logger.Warn("volume sync failed; retrying", "object", it.key.String(), "err", err)
		c.queue.AddRateLimited(it)
		return true
	}
	c.queue.Forget(it)
	return true
}

// syncClaim provisions a pending claim of the class, or grows a bound one.
func (c *controller) syncClaim(ctx context.Context, key types.NamespacedName) error {
	claim, err := c.claims.PersistentVolumeClaims(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	class, err := c.classOf(claim)
	if err != nil || class == nil {
		return err
	}
	switch {
	case claim.Spec.VolumeName == "" && claim.Status.Phase == corev1.ClaimPending:
		return c.provision(ctx, claim, class)
	case claim.Status.Phase == corev1.ClaimBound:
		return c.resize(ctx, claim)
	}
	return nil
}

// classOf returns the claim's class if this provisioner serves the claim, nil otherwise.
func (c *controller) classOf(claim *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, error) {
	name := ptr.Deref(claim.Spec.StorageClassName, "")
	named := claim.Annotations[annStorageProvisioner] == ProvisionerName || claim.Annotations[annBetaStorageProvisioner] == ProvisionerName
	if name == "" {
		if named {
			return nil, fmt.Errorf("claim %s/%s names provisioner %s but no storage class", claim.Namespace, claim.Name, ProvisionerName)
		}
		return nil, nil
	}
	class, err := c.classes.Get(name)
	switch {
	case apierrors.IsNotFound(err) && named:
		return nil, fmt.Errorf("storage class %s of claim %s/%s: %w", name, claim.Namespace, claim.Name, err)
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case class.Provisioner != ProvisionerName && !named:
		return nil, nil
	}
	return class, nil
}

// provision makes the backing and the PV of a claim whose pod has been placed.
func (c *controller) provision(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) error {
	node := claim.Annotations[annSelectedNode]
	if node == "" {
		return nil // WaitForFirstConsumer: the scheduler names the node first
	}
	pvName := "pvc-" + string(claim.UID)
	if _, err := c.volumes.Get(pvName); err == nil {
		return nil // made already; the PV controller binds it
	}
	if ptr.Deref(claim.Spec.VolumeMode, corev1.PersistentVolumeFilesystem) != corev1.PersistentVolumeFilesystem {
		c.recorder.Event(claim, corev1.EventTypeWarning, "ProvisioningFailed", "only volumeMode Filesystem is supported")
		return nil
	}
	req := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if req.Sign() <= 0 {
		c.recorder.Event(claim, corev1.EventTypeWarning, "ProvisioningFailed", "the claim requests no storage")
		return nil
	}
	size := roundSize(req.Value())
	d := c.diskOf(pvName)
	if err := d.createImage(size); err != nil {
		// No root or no loop devices: `make dev` still works for a developer without them,
		// but nothing stops a pod from writing past the claimed size.
		c.Logger.Warn("cannot make a size-limited volume; using a plain directory (size not enforced)", "pv", pvName, "err", err)
		if err := d.makePlainDir(); err != nil {
			c.recorder.Eventf(claim, corev1.EventTypeWarning, "ProvisioningFailed", "backing directory: %v", err)
			return err
		}
		c.recorder.Event(claim, corev1.EventTypeWarning, "SizeNotEnforced", "no loop device could be mounted; the volume is a plain host directory")
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName, Annotations: map[string]string{annProvisionedBy: ProvisionerName}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)},
			AccessModes:                   claim.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: ptr.Deref(class.ReclaimPolicy, corev1.PersistentVolumeReclaimDelete),
			StorageClassName:              class.Name,
			VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
			MountOptions:                  class.MountOptions,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: d.MountPath()}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	_, err := c.Kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil // made by an earlier sync the volume cache had not seen yet
	}
	if err != nil {
		c.recorder.Eventf(claim, corev1.EventTypeWarning, "ProvisioningFailed", "create volume %s: %v", pvName, err)
		return err
	}
	c.Logger.Info("volume provisioned", "pv", pvName, "claim", claim.Namespace+"/"+claim.Name, "node", node, "bytes", size)
	c.recorder.Eventf(claim, corev1.EventTypeNormal, "ProvisioningSucceeded", "provisioned volume %s on node %s", pvName, node)
	return nil
}

// syncVolume deletes a released volume whose policy is Delete, backing first.
func (c *controller) syncVolume(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !c.ours(pv) || pv.Status.Phase != corev1.VolumeReleased || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	if err := c.diskOf(pv.Name).remove(); err != nil {
		c.recorder.Eventf(pv, corev1.EventTypeWarning, "VolumeFailedDelete", "remove backing: %v", err)
		return err
	}
	if pv.DeletionTimestamp != nil {
		return nil
	}
	err = c.Kube.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	c.Logger.Info("volume deleted", "pv", pv.Name)
	return nil
}
