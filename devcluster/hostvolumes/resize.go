package hostvolumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Expansion: a claim of the class that asks for more than its volume has is grown, online
// where the host allows it, else at the volume's next mount.

// resize grows a bound claim's volume to its request. The control plane's expand controller
// does nothing for a `local` volume (it only records an ExternalExpanding event), so this is
// the controller half of an expansion, as an external resizer does it: grow the image and
// the PV. The filesystem is grown online where the host allows it and the claim reports the
// new capacity at once; otherwise the claim gets FileSystemResizePending, as with a driver
// that cannot expand online, and the dev kubelet finishes at the volume's next mount
// (FinishResize).
func (c *controller) resize(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	pv, err := c.volumes.Get(claim.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !c.ours(pv) || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != claim.UID {
		return nil
	}
	d := c.diskOf(pv.Name)
	want := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	have := pv.Spec.Capacity[corev1.ResourceStorage]
	if want.Cmp(have) > 0 {
		size := roundSize(want.Value())
		if d.hasImage() {
			if err := d.growImage(size); err != nil {
				c.recorder.Eventf(claim, corev1.EventTypeWarning, "VolumeResizeFailed", "grow volume %s: %v", pv.Name, err)
				return err
			}
		}
		pv = pv.DeepCopy()
		have = *resource.NewQuantity(size, resource.BinarySI)
		pv.Spec.Capacity[corev1.ResourceStorage] = have
		if _, err := c.Kube.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update capacity of %s: %w", pv.Name, err)
		}
		c.Logger.Info("volume grown", "pv", pv.Name, "bytes", size)
	}
	if cur := claim.Status.Capacity[corev1.ResourceStorage]; cur.Cmp(have) >= 0 || resizePending(claim) {
		return nil
	}
	if d.hasImage() {
		if err := d.growFS(); err != nil {
			c.Logger.Info("filesystem cannot grow online; it grows at the volume's next mount", "pv", pv.Name, "err", err)
			return patchClaimStatus(ctx, c.Kube, claim, nil, []corev1.PersistentVolumeClaimCondition{{
				Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.Now(),
				Message:            "Waiting for user to (re-)start a pod to finish file system resize of volume on node.",
			}})
		}
	}
	if err := patchClaimStatus(ctx, c.Kube, claim, &have, nil); err != nil {
		return err
	}
	c.recorder.Eventf(claim, corev1.EventTypeNormal, "VolumeResizeSuccessful", "volume %s grown to %s", pv.Name, have.String())
	return nil
}

func resizePending(claim *corev1.PersistentVolumeClaim) bool {
	for _, cond := range claim.Status.Conditions {
		if cond.Type == corev1.PersistentVolumeClaimFileSystemResizePending && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// patchClaimStatus sets the claim's capacity (when given) and replaces its resize conditions
// with add.
func patchClaimStatus(ctx context.Context, kube kubernetes.Interface, claim *corev1.PersistentVolumeClaim, capacity *resource.Quantity, add []corev1.PersistentVolumeClaimCondition) error {
	conds := add
	for _, cond := range claim.Status.Conditions {
		if cond.Type != corev1.PersistentVolumeClaimFileSystemResizePending && cond.Type != corev1.PersistentVolumeClaimResizing {
			conds = append(conds, cond)
		}
	}
	status := map[string]any{"conditions": conds}
	if capacity != nil {
		status["capacity"] = corev1.ResourceList{corev1.ResourceStorage: *capacity}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": claim.ResourceVersion}, // fail on a stale view
		"status":   status,
	})
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().PersistentVolumeClaims(claim.Namespace).Patch(ctx, claim.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch status of claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}

// FinishResize is the node half of an expansion that could not happen online (the claim
// has FileSystemResizePending): the dev kubelet calls it before it mounts claim's volume
// into a pod. It grows the filesystem offline and reports the volume's capacity on the
// claim. Volumes not made here, and claims with nothing pending, are left alone. While
// another container still uses the volume the resize stays pending and the volume is
// mounted at its old size, as a kubelet does; any other failure is returned, so the pod's
// start is retried.
func (c Config) FinishResize(ctx context.Context, claim *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	if !c.ours(pv) || !resizePending(claim) {
		return nil
	}
	if d := c.diskOf(pv.Name); d.hasImage() {
		var inUse *InUseError
		if err := d.growOffline(); errors.As(err, &inUse) {
			c.Logger.Info("volume in use; its resize stays pending", "pv", pv.Name)
			return nil
		} else if err != nil {
			return err
		}
	}
	have := pv.Spec.Capacity[corev1.ResourceStorage]
	return patchClaimStatus(ctx, c.Kube, claim, &have, nil)
}
