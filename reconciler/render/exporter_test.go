package render_test

import (
	"encoding/json"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// TestExporterSidecar: the exporter runs only when the node's spec says so, as a second
// container of the node's image with the server container's security context, serving the
// named port 9121. Its password reaches it only as a file of the auth Secret mounted in it
// alone: nothing of any password is in the pod spec (arguments, environment, annotations).
func TestExporterSidecar(t *testing.T) {
	const login = "operator-login-pw"
	for _, tc := range []struct {
		name      string
		exporter  bool
		tls       string
		wantAddr  string
		skipCheck bool
	}{
		{name: "off"},
		{name: "on", exporter: true, wantAddr: "--redis.addr=redis://localhost:6379"},
		{name: "on with TLS", exporter: true, tls: "c1-tls", wantAddr: "--redis.addr=rediss://localhost:6379", skipCheck: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := resolved
			res.Exporter = tc.exporter
			spec := render.NodeSpec(cluster(views.Placement{}, tc.tls), 0, res, "bestEffort")
			assert.Equal(t, tc.exporter, spec.Exporter)
			pod := render.Pod("c1-abcde", "ns1", spec, render.PodAnnotations(map[string]string{"team": "x"}, spec, login))
			server := pod.Spec.Containers[0]
			assert.Equal(t, render.ContainerName, server.Name, "the server stays the first container")
			for _, m := range server.VolumeMounts {
				assert.NotEqual(t, "exporter-auth", m.Name, "the server does not see the exporter's password")
			}
			if !tc.exporter {
				assert.Len(t, pod.Spec.Containers, 1)
				for _, v := range pod.Spec.Volumes {
					assert.NotEqual(t, "exporter-auth", v.Name)
				}
				assert.Equal(t, map[string]string{"team": "x", render.SafeToEvictAnnotation: "true"}, pod.Annotations)
				return
			}
			require.Len(t, pod.Spec.Containers, 2)
			exp := pod.Spec.Containers[1]
			assert.Equal(t, render.ExporterContainerName, exp.Name)
			assert.Equal(t, spec.Image, exp.Image, "runs from the node's own image")
			require.Greater(t, len(exp.Command), 5)
			assert.Equal(t, []string{"/bin/sh", "-c"}, exp.Command[:2], "under its supervisor loop")
			assert.Equal(t, "/usr/bin/prometheus-redis-exporter", exp.Command[4], "the loop's argument: the exporter")
			assert.Empty(t, exp.Args, "every argument is in the command")
			assert.Nil(t, exp.ReadinessProbe, "the pod's readiness is its server's alone")
			assert.Equal(t, []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9121, Protocol: corev1.ProtocolTCP}}, exp.Ports)
			assert.Contains(t, exp.Command, tc.wantAddr)
			assert.Subset(t, exp.Command, []string{"--redis.user=exporter", "--redis.password-file=/etc/valkey/exporter/exporter-passwords.json",
				"--config-command=-", "--web.listen-address=:9121"})
			assert.Equal(t, tc.skipCheck, contains(exp.Command, "--skip-tls-verification"), "TLS over loopback, unverified (no certificate names localhost)")
			assert.Empty(t, exp.Env, "no environment at all")
			assert.Empty(t, exp.EnvFrom)
			assert.Equal(t, server.SecurityContext, exp.SecurityContext, "as locked down as the server")
			assert.Equal(t, exp.Resources.Requests, exp.Resources.Limits, "a Guaranteed pod stays Guaranteed")
			assert.Equal(t, corev1.TerminationMessageFallbackToLogsOnError, exp.TerminationMessagePolicy)
			assert.Equal(t, []corev1.VolumeMount{{Name: "exporter-auth", MountPath: "/etc/valkey/exporter", ReadOnly: true}}, exp.VolumeMounts,
				"the exporter sees its password file and nothing else")
			vol := volume(t, pod, "exporter-auth").Secret
			require.NotNil(t, vol)
			assert.Equal(t, "c1-auth", vol.SecretName)
			assert.Equal(t, []corev1.KeyToPath{{Key: "exporter-passwords.json", Path: "exporter-passwords.json"}}, vol.Items, "one key of the auth Secret")

			assert.Equal(t, model.HashPassword(model.ExporterPassword(login)), pod.Annotations[render.AnnotationExporterPassword])
			assert.Equal(t, "true", pod.Annotations["prometheus.io/scrape"])
			assert.Equal(t, "9121", pod.Annotations["prometheus.io/port"])
			assert.Equal(t, "x", pod.Annotations["team"])

			whole, err := json.Marshal(pod)
			require.NoError(t, err)
			for _, secret := range []string{login, model.ExporterPassword(login), model.ReplicationPassword(login)} {
				assert.NotContains(t, string(whole), secret, "a password in the pod spec")
			}
		})
	}
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// TestExporterPasswords: the password file maps every address form either exporter release
// looks its password up by to the exporter password derived from the login.
func TestExporterPasswords(t *testing.T) {
	var got map[string]string
	require.NoError(t, json.Unmarshal(render.ExporterPasswords("login"), &got))
	pw := model.ExporterPassword("login")
	assert.Equal(t, map[string]string{
		"redis://localhost:6379":           pw,
		"redis://exporter@localhost:6379":  pw,
		"rediss://localhost:6379":          pw,
		"rediss://exporter@localhost:6379": pw,
	}, got)
}

// TestPodAnnotations: the user's podAnnotations are kept as given (and not changed in
// place); with the exporter the pod also names its exporter's password hash and carries the
// prometheus.io scrape annotations, unless the user set those.
func TestPodAnnotations(t *testing.T) {
	user := map[string]string{"prometheus.io/scrape": "false", "team": "x"}
	off := render.PodAnnotations(user, views.NodeSpec{}, "login")
	assert.Equal(t, user, off)
	on := render.PodAnnotations(user, views.NodeSpec{Exporter: true}, "login")
	assert.Equal(t, map[string]string{
		"prometheus.io/scrape":            "false",
		"prometheus.io/port":              "9121",
		"prometheus.io/path":              "/metrics",
		"team":                            "x",
		render.AnnotationExporterPassword: model.HashPassword(model.ExporterPassword("login")),
	}, on)
	assert.Equal(t, map[string]string{"prometheus.io/scrape": "false", "team": "x"}, user, "the cluster's map is not changed")
	assert.Len(t, render.PodAnnotations(nil, views.NodeSpec{Exporter: true}, "login"), 4)
	assert.Nil(t, render.PodAnnotations(nil, views.NodeSpec{}, "login"))
}

// TestExporterSpecHash: turning the exporter on or off replaces the nodes (the pod's
// containers are fixed), while a node made without it, before it existed, keeps its hash: an
// operator upgrade replaces nothing. The "off" hash is the one the same spec hashed to
// before the exporter field was added.
func TestExporterSpecHash(t *testing.T) {
	off := render.NodeSpec(cluster(views.Placement{}, ""), 0, resolved, "bestEffort")
	res := resolved
	res.Exporter = true
	on := render.NodeSpec(cluster(views.Placement{}, ""), 0, res, "bestEffort")
	assert.NotEqual(t, off.SpecHash, on.SpecHash)
	assert.Equal(t, "0abea3a7cbc5ddd0", off.SpecHash, "the hash of this spec without the exporter field")
}
