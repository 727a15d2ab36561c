package dockerpods

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

func TestEffectiveSecurityContainerWins(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	b := func(v bool) *bool { return &v }
	pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{
		RunAsUser: i64(999), RunAsGroup: i64(999), RunAsNonRoot: b(true), FSGroup: i64(1000), SupplementalGroups: []int64{5},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
	}}}

	s := effectiveSecurity(pod, &corev1.Container{})
	assert.Equal(t, "999:999", s.user)
	assert.True(t, s.runAsNonRoot)
	assert.Equal(t, int64(1000), s.fsGroup)
	assert.Equal(t, []string{"1000", "5"}, s.groupAdd)
	assert.Equal(t, []string{"seccomp=unconfined"}, s.securityOpt)

	s = effectiveSecurity(pod, &corev1.Container{SecurityContext: &corev1.SecurityContext{
		RunAsUser: i64(0), RunAsNonRoot: b(false), AllowPrivilegeEscalation: b(false),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		Capabilities:   &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
	}})
	assert.Equal(t, "0:999", s.user, "the container's user, the pod's group")
	assert.False(t, s.runAsNonRoot)
	assert.Equal(t, []string{"no-new-privileges"}, s.securityOpt, "the container's seccomp profile replaces the pod's")
	assert.Equal(t, []string{"NET_ADMIN"}, s.capAdd)
	assert.Equal(t, []string{"ALL"}, s.capDrop)

	s = effectiveSecurity(&corev1.Pod{}, &corev1.Container{})
	assert.Equal(t, "", s.user, "image default")
	assert.Equal(t, int64(-1), s.fsGroup)
}
