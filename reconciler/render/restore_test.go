package render_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/snapshot"
)

// A restoring node's pod fetches its shard's snapshot in an init container before the
// server starts: the operator's image, the object named by the manifest, the store's keys
// from the user's Secret by reference only, the CA mounted, the data volume shared. The
// restore is not part of the spec hash, and a node without one has no init container.
func TestRestoreFetchContainer(t *testing.T) {
	s := render.NodeSpec(cluster(views.Placement{}, ""), 1, resolved, "bestEffort")
	plain := render.Pod("c1-abcde", "ns1", s, nil)
	assert.Empty(t, plain.Spec.InitContainers, "no restore, no init container")

	s.Restore = &views.NodeRestore{
		Endpoint: "http://10.0.0.5:8333", Bucket: "backups", Region: "eu-west-1",
		CredentialsSecret: "s3", CASecret: "s3-ca",
		Object: "p/ns/c/b/shard-1.rdb", SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Bytes: 1234, RDBVersion: 11, FetcherImage: "valkey-operator:dev",
	}
	assert.Equal(t, render.SpecHash(s), s.SpecHash, "the restore does not enter the spec hash")
	pod := render.Pod("c1-abcde", "ns1", s, nil)
	require.Len(t, pod.Spec.InitContainers, 1)
	c := pod.Spec.InitContainers[0]
	assert.Equal(t, render.RestoreFetchContainer, c.Name)
	assert.Equal(t, "valkey-operator:dev", c.Image)
	assert.Equal(t, []string{"restore-fetch"}, c.Args)
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for name, want := range map[string]string{
		snapshot.EnvRestoreEndpoint: "http://10.0.0.5:8333", snapshot.EnvRestoreBucket: "backups", snapshot.EnvRestoreRegion: "eu-west-1",
		snapshot.EnvRestoreObject: "p/ns/c/b/shard-1.rdb", snapshot.EnvRestoreSHA256: s.Restore.SHA256, snapshot.EnvRestoreBytes: "1234",
		snapshot.EnvRestoreRDBVersion: "11", snapshot.EnvRestoreMaxRDBVersion: "80", snapshot.EnvRestoreValkeyVersion: "9.0.0",
		snapshot.EnvRestoreShard: "1", snapshot.EnvRestoreDir: render.DataDir, snapshot.EnvRestoreCAFile: render.RestoreCADir + "/ca.crt",
	} {
		assert.Equal(t, want, env[name].Value, name)
	}
	for name, key := range map[string]string{snapshot.EnvRestoreAccessKey: "accessKey", snapshot.EnvRestoreSecretKey: "secretKey"} {
		e := env[name]
		assert.Empty(t, e.Value, "%s is never a value in the pod spec", name)
		require.NotNil(t, e.ValueFrom, name)
		require.NotNil(t, e.ValueFrom.SecretKeyRef, name)
		assert.Equal(t, "s3", e.ValueFrom.SecretKeyRef.Name)
		assert.Equal(t, key, e.ValueFrom.SecretKeyRef.Key)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	assert.Equal(t, render.DataDir, mounts["data"], "fetches into the server's data directory")
	assert.Equal(t, render.RestoreCADir, mounts["restore-ca"])
	var ca *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == "restore-ca" {
			ca = &pod.Spec.Volumes[i]
		}
	}
	require.NotNil(t, ca)
	assert.Equal(t, "s3-ca", ca.Secret.SecretName)
	require.NotNil(t, c.SecurityContext)
	assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	assert.True(t, *c.SecurityContext.RunAsNonRoot)
}
