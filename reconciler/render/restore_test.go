package render_test

import (
	"strings"
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

// The restore-fetch container is told the AOF's names exactly when the node's server runs
// with appendonly yes (the mode's directive, or spec.valkey's under mode None): that server
// loads its AOF and never dump.rdb. Any other node's container has no AOF variable at all,
// so it renders as it did before restores into an AOF were supported.
func TestRestoreFetchAOFLayout(t *testing.T) {
	tests := []struct {
		name   string
		mode   string
		valkey map[string]string
		aof    bool
	}{
		{name: "None", mode: views.PersistenceNone},
		{name: "RDB", mode: views.PersistenceRDB},
		{name: "AOF", mode: views.PersistenceAOF, aof: true},
		{name: "RDBAndAOF", mode: views.PersistenceRDBAndAOF, aof: true},
		{name: "None, spec.valkey turns the AOF on", mode: views.PersistenceNone, valkey: map[string]string{"appendonly": " YES"}, aof: true},
		{name: "None, spec.valkey keeps it off", mode: views.PersistenceNone, valkey: map[string]string{"appendonly": "no"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := render.NodeSpec(cluster(views.Placement{}, ""), 0, resolved, "bestEffort")
			s.Persistence = views.Persistence{Mode: tt.mode, Size: "1Gi"}
			s.Valkey = tt.valkey
			s.Restore = &views.NodeRestore{Endpoint: "http://10.0.0.5:8333", Bucket: "backups", CredentialsSecret: "s3",
				Object: "p/ns/c/b/shard-0.rdb", SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
				Bytes: 1234, RDBVersion: 11, FetcherImage: "valkey-operator:dev"}
			assert.Equal(t, tt.aof, render.KeepsAOF(s))
			assert.Equal(t, tt.aof, strings.Contains(strings.ToLower(render.ConfigFile(s)), `appendonly "yes"`), "KeepsAOF agrees with valkey.conf")
			pod := render.Pod("c1-abcde", "ns1", s, nil)
			require.Len(t, pod.Spec.InitContainers, 1)
			env := map[string]string{}
			for _, e := range pod.Spec.InitContainers[0].Env {
				env[e.Name] = e.Value
			}
			if !tt.aof {
				assert.NotContains(t, env, snapshot.EnvRestoreAOFDir)
				assert.NotContains(t, env, snapshot.EnvRestoreAOFFile)
				return
			}
			assert.Equal(t, "appendonlydir", env[snapshot.EnvRestoreAOFDir], "Valkey's default appenddirname")
			assert.Equal(t, "appendonly.aof", env[snapshot.EnvRestoreAOFFile], "Valkey's default appendfilename")
			assert.NotContains(t, render.ConfigFile(s), "appenddirname", "the operator relies on the default")
			assert.NotContains(t, render.ConfigFile(s), "appendfilename", "the operator relies on the default")
		})
	}
}
