package render

import (
	"encoding/json"
	"maps"
	"strconv"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// The metrics exporter sidecar (ValkeyConfig spec.exporter): Debian's
// prometheus-redis-exporter, run from the node's own image, reading its own node's server
// over the pod's loopback and serving Prometheus metrics on ExporterPort.
const (
	ExporterContainerName = "exporter"
	ExporterPort          = 9121
	// ExporterBinary is where the local images (hack/valkey-image) hold the exporter; in an
	// image without it the sidecar's supervisor keeps trying and the server serves on.
	ExporterBinary = "/usr/bin/prometheus-redis-exporter"
	ExporterDir    = "/etc/valkey/exporter"
	// AuthExporterPasswordsKey holds the exporter's password file (ExporterPasswords).
	AuthExporterPasswordsKey = "exporter-passwords.json"
	ExporterPasswordFile     = ExporterDir + "/" + AuthExporterPasswordsKey
	// AnnotationExporterPassword, on a pod running the exporter, is the SHA-256 of the
	// password its exporter was started with. The exporter reads its password file once, at
	// start, so after an operator password rotation it keeps logging in with the previous
	// one; the operator keeps that hash accepted on that pod's server alone, for as long as
	// the pod lives (live_acl.go). A hash, like the ACL file's: it opens nothing.
	AnnotationExporterPassword = "valkey.gomomento.com/exporter-password-sha256"
)

// exporterResources are the sidecar's requests and limits, equal so that a pod whose server
// has them (a Guaranteed pod) stays Guaranteed. The exporter holds one scrape's worth of
// metrics (tens of MB at most) and works only when scraped.
var exporterResources = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("100m"),
	corev1.ResourceMemory: resource.MustParse("64Mi"),
}

// ExporterArgs renders the exporter's command line: flags both Debian releases of it (1.45
// in bookworm, 1.86 in sid) accept, and no secret. It logs in as the exporter user to its
// own server over loopback, with the password from ExporterPasswordFile, and never runs
// CONFIG (config-command "-"): CONFIG GET would need a grant that shows masterauth.
//
// With TLS it speaks TLS but does not verify the server's certificate: the certificate
// names the cluster's DNS names, never localhost, and the exporter cannot be told which name
// to expect. Nothing can stand between the two ends of a loopback connection inside the
// pod's network namespace, whose port 6379 the server holds; the link is still encrypted.
func ExporterArgs(tls bool) []string {
	args := []string{
		"--redis.addr=" + exporterAddr(tls),
		"--redis.user=" + model.ExporterUser,
		"--redis.password-file=" + ExporterPasswordFile,
		"--config-command=-",
		"--web.listen-address=:" + strconv.Itoa(ExporterPort),
	}
	if tls {
		args = append(args, "--skip-tls-verification")
	}
	return args
}

// ExporterCommand is the sidecar's whole command line: exporterSupervisor running the
// exporter with ExporterArgs.
func ExporterCommand(tls bool) []string {
	return append([]string{"/bin/sh", "-c", exporterSupervisor, "exporter-supervisor", ExporterBinary}, ExporterArgs(tls)...)
}

// exporterSupervisor is the sidecar's entrypoint, a POSIX shell loop: it runs its arguments
// (the exporter) and starts them again whenever they exit, after a pause that doubles from 1 s
// up to 64 s and starts over after a run of 10 minutes or more.
//
// Why a loop of our own: a pod is Ready only while every one of its containers is, and
// disruption budgets count Ready pods. Our pods never restart a container (restartPolicy
// Never: a server that stops is replaced, never restarted empty), so an exporter that exited
// would leave its pod unready for good, and its healthy server would count as disrupted and
// hold back evictions of its shard's other copies. With the loop the container runs for as
// long as the pod does, and it has no readiness probe: a pod's readiness is its server's
// alone (and the in-sync gate's). An exporter that is down shows where exporter health
// belongs, as a failed scrape in Prometheus.
//
// SIGTERM (the pod's deletion) stops the exporter and ends the loop at once: as PID 1 the
// shell would otherwise ignore it and hold the pod for its whole grace period.
const exporterSupervisor = `child=
trap 'if [ -n "$child" ]; then kill "$child" 2>/dev/null; fi; exit 0' TERM INT
delay=1
while :; do
	started=$(date +%s)
	"$@" &
	child=$!
	wait "$child"
	code=$?
	child=
	if [ $(($(date +%s) - started)) -ge 600 ]; then delay=1; fi
	echo "exporter-supervisor: the exporter exited with status $code; starting it again in ${delay}s" >&2
	sleep "$delay" &
	wait $!
	if [ "$delay" -lt 64 ]; then delay=$((delay * 2)); fi
done`

// exporterAddr is the server the exporter scrapes: its own pod's, over loopback.
func exporterAddr(tls bool) string {
	if tls {
		return "rediss://" + exporterHostPort
	}
	return "redis://" + exporterHostPort
}

var exporterHostPort = "localhost:" + strconv.Itoa(ClientPort)

// ExporterPasswords renders the exporter's password file: a JSON object mapping the address
// it scrapes to the exporter user's password (the one derived from the operator password
// the servers accept). It lists both addresses (plain and TLS: the Secret serves the whole
// cluster) in both forms the exporter looks its password up by (1.45 by the address as
// given, 1.86 with the user name in it).
func ExporterPasswords(operatorPassword string) []byte {
	pw := model.ExporterPassword(operatorPassword)
	m := map[string]string{}
	for _, scheme := range []string{"redis://", "rediss://"} {
		m[scheme+exporterHostPort] = pw
		m[scheme+model.ExporterUser+"@"+exporterHostPort] = pw
	}
	b, _ := json.Marshal(m) // a map of strings always encodes; keys sorted
	return b
}

// PodAnnotations are the annotations a node's pod is created with: the cluster's
// podAnnotations and, with the exporter, the hash of the password its exporter will read
// (AnnotationExporterPassword: the one derived from loginPassword, the operator password
// the auth Secret's password file is rendered from) and the conventional prometheus.io
// scrape annotations, unless podAnnotations set those.
func PodAnnotations(podAnnotations map[string]string, s views.NodeSpec, loginPassword string) map[string]string {
	out := maps.Clone(podAnnotations)
	if !s.Exporter {
		return out
	}
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range map[string]string{
		"prometheus.io/scrape": "true",
		"prometheus.io/port":   strconv.Itoa(ExporterPort),
		"prometheus.io/path":   "/metrics",
	} {
		if _, set := out[k]; !set {
			out[k] = v
		}
	}
	out[AnnotationExporterPassword] = model.HashPassword(model.ExporterPassword(loginPassword))
	return out
}

// addExporter adds the exporter sidecar to a node's pod. It gets only its password file (a
// volume of its own holding one key of the auth Secret: no password in its arguments or
// environment, so none in the pod spec or the container runtime's metadata) and runs with
// the server container's security context, under exporterSupervisor and without a readiness
// probe, so that it never makes its pod unready. Its termination message is its last output,
// so a sidecar that cannot start at all (an image without /bin/sh) says why in the pod's
// status; the server does not depend on it.
func addExporter(pod *corev1.Pod, s views.NodeSpec) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "exporter-auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: AuthSecretName(s.Cluster), DefaultMode: ptr.To[int32](0o440),
		Items: []corev1.KeyToPath{{Key: AuthExporterPasswordsKey, Path: AuthExporterPasswordsKey}}}}})
	var sc *corev1.SecurityContext
	if len(pod.Spec.Containers) > 0 {
		sc = pod.Spec.Containers[0].SecurityContext.DeepCopy()
	}
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
		Name:    ExporterContainerName,
		Image:   s.Image,
		Command: ExporterCommand(s.TLSSecretRef != ""),
		Ports:   []corev1.ContainerPort{{Name: "metrics", ContainerPort: ExporterPort, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{
			Requests: exporterResources.DeepCopy(), Limits: exporterResources.DeepCopy(),
		},
		VolumeMounts:             []corev1.VolumeMount{{Name: "exporter-auth", MountPath: ExporterDir, ReadOnly: true}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          sc,
	})
}
