package render

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/gomomento/valkey-operator/valkeyops/snapshot"
)

// RestoreFetchContainer is the name of the init container that downloads a restoring
// shard's snapshot into the data directory before the server's first start. The operator's
// pod admission policy (deploy/25-operator-writes-policy.yaml) admits no other init
// container.
const RestoreFetchContainer = "restore-fetch"

// RestoreCADir is where the restore-fetch container finds the object store's private CA.
const RestoreCADir = "/etc/valkey-restore/ca"

// The names of a server's append-only file. The operator renders neither appenddirname nor
// appendfilename, and the CRD forbids spec.valkey to set them, so every server keeps its AOF
// under Valkey's defaults for them (src/config.c): the directory appendonlydir in its data
// directory, and files named from appendonly.aof.
const (
	AOFDirName  = "appendonlydir"
	AOFFileName = "appendonly.aof"
)

// KeepsAOF reports whether node's server runs with appendonly yes: a persistence mode with
// an AOF, or spec.valkey turning it on under mode None. Such a server loads its AOF at start
// and never dump.rdb, so a restore must place the snapshot as its AOF's base.
func KeepsAOF(s views.NodeSpec) bool {
	// Valkey reads a yes/no directive without regard to case.
	return strings.EqualFold(strings.TrimSpace(serverSettings(s)["appendonly"]), "yes")
}

// addRestoreFetch gives pod the restore-fetch init container of a restoring node
// (spec.restore): the operator's image running `manager restore-fetch`, which downloads the
// shard's object to dump.rdb in the data directory (or, for a server that keeps an AOF, to
// its AOF's base file with a manifest naming it; the AOF variables are set only then, so
// the init container of any other restore renders as before), checking its size, SHA-256 and RDB
// version, before the server starts and loads it. Everything it needs comes as environment:
// the object store's keys from the user's Secret (secretKeyRef), never in argv or in the
// pod's spec as values, and the CA as a mounted Secret.
func addRestoreFetch(pod *corev1.Pod, s views.NodeSpec) {
	r := s.Restore
	maxRDB, _ := model.MaxRDBVersion(s.Version)
	env := []corev1.EnvVar{
		{Name: snapshot.EnvRestoreEndpoint, Value: r.Endpoint},
		{Name: snapshot.EnvRestoreBucket, Value: r.Bucket},
		{Name: snapshot.EnvRestoreObject, Value: r.Object},
		{Name: snapshot.EnvRestoreSHA256, Value: r.SHA256},
		{Name: snapshot.EnvRestoreBytes, Value: strconv.FormatInt(r.Bytes, 10)},
		{Name: snapshot.EnvRestoreRDBVersion, Value: strconv.Itoa(r.RDBVersion)},
		{Name: snapshot.EnvRestoreMaxRDBVersion, Value: strconv.Itoa(maxRDB)},
		{Name: snapshot.EnvRestoreValkeyVersion, Value: s.Version},
		{Name: snapshot.EnvRestoreShard, Value: strconv.Itoa(s.Shard)},
		{Name: snapshot.EnvRestoreDir, Value: DataDir},
		secretEnv(snapshot.EnvRestoreAccessKey, r.CredentialsSecret, "accessKey"),
		secretEnv(snapshot.EnvRestoreSecretKey, r.CredentialsSecret, "secretKey"),
	}
	if KeepsAOF(s) {
		env = append(env, corev1.EnvVar{Name: snapshot.EnvRestoreAOFDir, Value: AOFDirName},
			corev1.EnvVar{Name: snapshot.EnvRestoreAOFFile, Value: AOFFileName})
	}
	if r.Region != "" {
		env = append(env, corev1.EnvVar{Name: snapshot.EnvRestoreRegion, Value: r.Region})
	}
	mounts := []corev1.VolumeMount{{Name: dataVolume, MountPath: DataDir}}
	if r.CASecret != "" {
		env = append(env, corev1.EnvVar{Name: snapshot.EnvRestoreCAFile, Value: RestoreCADir + "/ca.crt"})
		mounts = append(mounts, corev1.VolumeMount{Name: "restore-ca", MountPath: RestoreCADir, ReadOnly: true})
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "restore-ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: r.CASecret, DefaultMode: ptr.To[int32](0o440),
			Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}})
	}
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{
		Name:         RestoreFetchContainer,
		Image:        r.FetcherImage,
		Args:         []string{"restore-fetch"},
		Env:          env,
		VolumeMounts: mounts,
		// A refusal prints one line saying why (a checksum that differs, an RDB too new);
		// it becomes the container's termination message, which the operator reports.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](ValkeyUID),
			RunAsGroup:               ptr.To[int64](ValkeyUID),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	})
}

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}
