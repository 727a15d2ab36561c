package dockerpods

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Persistent volume claims, mounted the way a kubelet mounts a `local` volume: the claim must
// be bound, a pending filesystem resize is finished first, the volume's host directory is
// bind-mounted into the containers, and the pod's fsGroup is applied to the volume's files so
// a non-root container user can write them.

// ClaimNotBoundError says a pod's claim has no volume yet. The pod's start is retried (as a
// kubelet's volume manager waits) and the message shows in the container's waiting state.
type ClaimNotBoundError struct {
	Namespace, Name string
	Phase           corev1.PersistentVolumeClaimPhase
}

func (e *ClaimNotBoundError) Error() string {
	return fmt.Sprintf("persistentvolumeclaim %s/%s is not bound (phase %q)", e.Namespace, e.Name, e.Phase)
}

// UnsupportedVolumeError is a bound volume of a kind the dev kubelet cannot mount.
type UnsupportedVolumeError struct{ Volume string }

func (e *UnsupportedVolumeError) Error() string {
	return fmt.Sprintf("persistentvolume %s is neither local nor hostPath: the dev kubelet cannot mount it", e.Volume)
}

// claimDir resolves a pod's claim to its volume's host directory, applying the pod's fsGroup
// on the way. Looked up on the API server, not a cache: it runs once per pod start, and the
// claim was bound moments ago.
func (p *Provider) claimDir(ctx context.Context, pod *corev1.Pod, src *corev1.PersistentVolumeClaimVolumeSource) (string, error) {
	kube := p.shared.Kube.CoreV1()
	claim, err := kube.PersistentVolumeClaims(pod.Namespace).Get(ctx, src.ClaimName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentvolumeclaim %s: %w", src.ClaimName, err)
	}
	if claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
		return "", &ClaimNotBoundError{Namespace: claim.Namespace, Name: claim.Name, Phase: claim.Status.Phase}
	}
	pv, err := kube.PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentvolume %s: %w", claim.Spec.VolumeName, err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != claim.UID {
		return "", fmt.Errorf("persistentvolume %s is not bound to claim %s/%s", pv.Name, claim.Namespace, claim.Name)
	}
	if p.shared.FinishResize != nil {
		if err := p.shared.FinishResize(ctx, claim, pv); err != nil {
			return "", fmt.Errorf("resize of persistentvolume %s: %w", pv.Name, err)
		}
	}
	switch {
	case pv.Spec.Local != nil:
		// A kubelet manages the ownership of `local` volumes (not of hostPath ones).
		if psc := pod.Spec.SecurityContext; psc != nil && psc.FSGroup != nil && !src.ReadOnly {
			if err := applyFSGroup(pv.Spec.Local.Path, *psc.FSGroup, psc.FSGroupChangePolicy); err != nil {
				return "", fmt.Errorf("fsGroup on persistentvolume %s: %w", pv.Name, err)
			}
		}
		return pv.Spec.Local.Path, nil
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path, nil
	}
	return "", &UnsupportedVolumeError{Volume: pv.Name}
}

// applyFSGroup gives the tree at root to group gid the way a kubelet does for a volume it
// manages: every file group-owned by gid and group read-write, every directory also group
// searchable and setgid (so new files inherit the group). With the OnRootMismatch policy a
// root already set up that way is left alone.
func applyFSGroup(root string, gid int64, policy *corev1.PodFSGroupChangePolicy) error {
	if policy != nil && *policy == corev1.FSGroupChangeOnRootMismatch && rootOwnedBy(root, gid) {
		return nil
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(gid)); err != nil {
			return err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		mask := fs.FileMode(0o660)
		if d.IsDir() {
			mask |= fs.ModeSetgid | 0o110
		}
		return os.Chmod(path, info.Mode()|mask)
	})
}

func rootOwnedBy(root string, gid int64) bool {
	info, err := os.Stat(root)
	if err != nil || !info.IsDir() {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int64(st.Gid) == gid && info.Mode().Perm()&0o770 == 0o770 && info.Mode()&fs.ModeSetgid != 0
}
