package render

import (
	"fmt"
	"strconv"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
)

// InSyncCondition is the pod condition the operator sets, and the readiness gate every pod
// it creates carries: a pod is Ready only when its containers are and its server is an
// in-sync member of the cluster (a primary that owns its slots, or a replica that has caught
// up with its shard's primary). Disruption budgets count Ready pods, so they count in-sync
// copies of a shard's data, not merely servers that answer.
const InSyncCondition = "valkey.gomomento.com/in-sync"

// SafeToEvictAnnotation tells the cluster autoscaler whether it may evict a pod when it
// scales a node down. It would otherwise never evict pods with local storage (every server
// keeps its data in an emptyDir), and so never scale down a node that holds one. The shard's
// budget keeps those evictions safe, as it does for `kubectl drain`.
const SafeToEvictAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict"

// BudgetName is the name of shard's PodDisruptionBudget.
func BudgetName(cluster string, shard int) string {
	return fmt.Sprintf("%s-shard-%d", cluster, shard)
}

// BudgetShard parses the shard index out of a budget name of cluster (false when name is
// not one of its budgets).
func BudgetShard(cluster, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, cluster+"-shard-")
	if !ok {
		return 0, false
	}
	shard, err := strconv.Atoi(rest)
	if err != nil || shard < 0 || strconv.Itoa(shard) != rest {
		return 0, false
	}
	return shard, true
}

// BudgetMinAvailable is how many of a shard's pods must stay Ready (in sync) for the
// eviction API to take one: every replica's worth, so an eviction never takes the last
// in-sync copy, and at least one, so a shard without replicas is never evicted at all (the
// operator moves its data first, then retires its pod itself).
//
// Why minAvailable and not maxUnavailable 1: with maxUnavailable the disruption controller
// counts the pods a budget expects from the scale of each pod's controller, which a
// ValkeyNode does not have (Kubernetes allows only an integer minAvailable for pods of such
// controllers), and it counts only pods that exist: while a lost pod's replacement is not
// created yet, maxUnavailable 1 of the one pod left would let its last copy go. With every
// pod of a shard present, minAvailable replicas is maxUnavailable 1.
func BudgetMinAvailable(replicasPerShard int) int32 { return int32(max(1, replicasPerShard)) }

// ShardBudget renders the PodDisruptionBudget of one shard: its pods, at least
// BudgetMinAvailable of them Ready. A pod that is not Ready (a replica still syncing, a
// server that never joined) may always be evicted: it holds no copy the shard relies on, and
// a wedged shard must not block a node's drain for ever.
func ShardBudget(cluster, namespace string, shard, replicasPerShard int) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	labels := NodeLabels(cluster, shard)
	return policyv1ac.PodDisruptionBudget(BudgetName(cluster, shard), namespace).
		WithLabels(labels).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMinAvailable(intstr.FromInt32(BudgetMinAvailable(replicasPerShard))).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{
				LabelCluster: cluster, LabelShard: labels[LabelShard],
			})).
			WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow))
}
