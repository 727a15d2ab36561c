// Package render builds the Kubernetes objects the operator owns for a ValkeyCluster. It is
// pure: the same inputs always give the same object, which is what lets the reconciler compare
// desired against live state and write nothing when they already agree.
package render

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// Label keys and values on every owned object (Labels); ValkeyNodes and their pods also
// carry LabelShard (NodeLabels).
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "valkey-operator"
	LabelCluster   = "valkey.gomomento.com/cluster"
	LabelShard     = "valkey.gomomento.com/shard"
)

// Ports served by every Valkey server.
const (
	ClientPort = 6379
	BusPort    = 16379
)

// Keys of the auth Secret and the ACL ConfigMap.
const (
	AuthPasswordKey         = "password"
	AuthOperatorPasswordKey = "operator-password"
	// AuthReplicationConfKey holds a valkey.conf fragment with the replication login
	// (masteruser/masterauth). Pods load it as their config file so the operator's password
	// never appears on a command line, in `ps` or in the container runtime's metadata.
	AuthReplicationConfKey = "replication.conf"
	ACLFileKey             = "users.acl"
	ConfFileKey            = "valkey.conf"
)

// Labels are the labels of every object owned by cluster.
func Labels(cluster string) map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelCluster: cluster}
}

// NodeLabels are the labels of a ValkeyNode and its Pod.
func NodeLabels(cluster string, shard int) map[string]string {
	l := Labels(cluster)
	l[LabelShard] = strconv.Itoa(shard)
	return l
}

// ServiceName is the headless Service's name: the cluster's own name.
func ServiceName(cluster string) string { return cluster }

// AuthSecretName is the name of the generated-password Secret.
func AuthSecretName(cluster string) string { return cluster + "-auth" }

// NodeConfigMapName is the name of a node's config-file ConfigMap (owned by its ValkeyNode,
// written once: the settings of a node never change, a changed config replaces the node).
func NodeConfigMapName(node string) string { return node + "-config" }

// ACLConfigMapName is the name of the rendered ACL file's ConfigMap.
func ACLConfigMapName(cluster string) string { return cluster + "-acl" }

// Service renders the headless Service that gives every pod a stable DNS name and lets
// nodes find each other before they are Ready (publishNotReadyAddresses). It is what the
// operator applies: the fields it owns, nothing the API server defaults.
func Service(cluster, namespace string) *corev1ac.ServiceApplyConfiguration {
	port := func(name string, p int32) *corev1ac.ServicePortApplyConfiguration {
		return corev1ac.ServicePort().WithName(name).WithPort(p).WithTargetPort(intstr.FromInt32(p)).WithProtocol(corev1.ProtocolTCP)
	}
	return corev1ac.Service(ServiceName(cluster), namespace).
		WithLabels(Labels(cluster)).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithPublishNotReadyAddresses(true).
			WithSelector(Labels(cluster)).
			WithPorts(port("client", ClientPort), port("bus", BusPort)))
}

// NewPassword returns 32 random bytes as hex (256 bits; printable so it survives any client).
func NewPassword(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, 32)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("generating password: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// AuthSecret renders the auth Secret: the passwords the user may read and edit, and the
// replication login and exporter password file new pods start with. Both follow from the
// operator password every server accepts now (loginPassword), which is the user's
// operatorPassword except while a rotation to it is under way: a pod created meanwhile must
// authenticate to servers that do not know the new password yet.
func AuthSecret(cluster, namespace, password, operatorPassword, loginPassword string) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(AuthSecretName(cluster), namespace).
		WithLabels(Labels(cluster)).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{
			AuthPasswordKey:          []byte(password),
			AuthOperatorPasswordKey:  []byte(operatorPassword),
			AuthReplicationConfKey:   ReplicationConf(loginPassword),
			AuthExporterPasswordsKey: ExporterPasswords(loginPassword),
		})
}

// AppliedAuthSecretName is the name of the Secret in which the operator records the operator
// password every server accepts.
func AppliedAuthSecretName(cluster string) string { return cluster + "-auth-applied" }

// AppliedAuthSecret renders the operator's record of the operator password every server
// accepts (the one it logs in with). It lives apart from the auth Secret so that editing or
// deleting that Secret, or restarting the operator half-way through a rotation, never loses
// the one password the running servers are known to accept.
func AppliedAuthSecret(cluster, namespace, loginPassword string) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(AppliedAuthSecretName(cluster), namespace).
		WithLabels(Labels(cluster)).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{AuthOperatorPasswordKey: []byte(loginPassword)})
}

// ReplicationConf renders the valkey.conf fragment with which replicas authenticate to their
// primary: the replication user, with the password that goes with the operator password the
// servers accept (model.ReplicationLogin).
func ReplicationConf(operatorPassword string) []byte {
	user, pw := model.ReplicationLogin(operatorPassword)
	return []byte("masteruser " + user + "\nmasterauth " + pw + "\n")
}

// ACLConfigMap renders the ConfigMap holding the ACL file.
func ACLConfigMap(cluster, namespace, aclFile string) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(ACLConfigMapName(cluster), namespace).
		WithLabels(Labels(cluster)).
		WithData(map[string]string{ACLFileKey: aclFile})
}

// NodeName returns a fresh ValkeyNode/Pod name: {cluster}-{5 random lowercase hex}.
func NodeName(cluster string, r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, 3)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("generating node name: %w", err)
	}
	return cluster + "-" + hex.EncodeToString(b)[:5], nil
}
