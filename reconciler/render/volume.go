package render

import (
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The data volume's markings. LabelNode names the ValkeyNode a claim was made for, so a
// retained claim still says whose data it holds once that node is gone (it also names a
// pod's node on the pod, and on the node's external Service, which selects the pod by it). LabelReclaim says
// what becomes of the claim when its node goes: with Delete the claim is owned by the node
// and the garbage collector takes it along; with Retain it has no owner and stays. Owning it
// (rather than deleting it from a finalizer) keeps reclaim right even when the whole cluster
// is deleted at once and the operator never sees its nodes go.
// AnnotationNodeUID is the UID of the node the claim was made for: a claim of the same name
// made for anyone else (another cluster, a node of the same name made later) is never used.
const (
	LabelNode         = "valkey.gomomento.com/node"
	LabelReclaim      = "valkey.gomomento.com/reclaim"
	AnnotationNodeUID = "valkey.gomomento.com/node-uid"
)

// dataVolume is the name of the pod volume holding the server's data and nodes.conf.
const dataVolume = "data"

// DataClaimName is the PersistentVolumeClaim of a durable node's data volume.
func DataClaimName(node string) string { return node + "-data" }

// DataClaimLabels are the labels of node's data claim with reclaim policy reclaim.
func DataClaimLabels(cluster string, shard int, node, reclaim string) map[string]string {
	l := NodeLabels(cluster, shard)
	l[LabelNode] = node
	l[LabelReclaim] = reclaim
	return l
}

// DataClaim renders the PersistentVolumeClaim of durable node's data volume: one
// ReadWriteOnce filesystem of the resolved size in the resolved StorageClass (none named: the
// cluster's default class, set by the API server's admission). It never names a volume or a
// data source: a claim of the operator's binds only a volume provisioned for it, never someone
// else's data. Ownership (reclaim) is the caller's: see ClaimOwners.
func DataClaim(node, namespace string, nodeUID types.UID, s views.NodeSpec) (*corev1.PersistentVolumeClaim, error) {
	size, err := resource.ParseQuantity(s.Persistence.Size)
	if err != nil {
		return nil, err
	}
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        DataClaimName(node),
			Namespace:   namespace,
			Labels:      DataClaimLabels(s.Cluster, s.Shard, node, s.Persistence.Reclaim),
			Annotations: map[string]string{AnnotationNodeUID: string(nodeUID)},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  ptr.To(corev1.PersistentVolumeFilesystem),
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if s.Persistence.StorageClassName != "" {
		c.Spec.StorageClassName = ptr.To(s.Persistence.StorageClassName)
	}
	return c, nil
}

// ClaimOwners are the owner references a node's claim has under reclaim: the node as its
// controller for Delete, none for Retain.
func ClaimOwners(reclaim string, node metav1.OwnerReference) []metav1.OwnerReference {
	if reclaim == views.ReclaimRetain {
		return nil
	}
	return []metav1.OwnerReference{node}
}

// dataVolumeSource is where a node's server keeps its data: its claim when durable, an
// emptyDir (gone with the pod) otherwise.
func dataVolumeSource(node string, s views.NodeSpec) corev1.VolumeSource {
	if s.Persistence.Durable() {
		return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: DataClaimName(node)}}
	}
	return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
}
