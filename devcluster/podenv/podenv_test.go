package podenv

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type fakeLookup struct {
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
}

func (f fakeLookup) ConfigMap(_, name string) (*corev1.ConfigMap, error) {
	if cm, ok := f.cms[name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func (f fakeLookup) Secret(_, name string) (*corev1.Secret, error) {
	if s, ok := f.secrets[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"POD_IP": "10.0.0.7", "EMPTY": ""}
	for _, tc := range []struct{ in, want string }{
		{"--cluster-announce-ip $(POD_IP)", "--cluster-announce-ip 10.0.0.7"},
		{"$(POD_IP):6379", "10.0.0.7:6379"},
		{"$(UNDEFINED)", "$(UNDEFINED)"},
		{"$$(POD_IP)", "$(POD_IP)"},
		{"cost $5", "cost $5"},
		{"a$(EMPTY)b", "ab"},
		{"open $(POD_IP", "open $(POD_IP"},
		{"trailing $", "trailing $"},
	} {
		assert.Equal(t, tc.want, Expand(tc.in, vars), tc.in)
	}
}

func TestResolve(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vc-abcde", Namespace: "ns1", Labels: map[string]string{"app": "valkey"}},
		Spec:       corev1.PodSpec{NodeName: "devnode-2"},
	}
	lk := fakeLookup{
		cms:     map[string]*corev1.ConfigMap{"cfg": {Data: map[string]string{"maxmemory": "100mb", "B": "2"}}},
		secrets: map[string]*corev1.Secret{"auth": {Data: map[string][]byte{"password": []byte("s3cret")}}},
	}
	optional := true
	c := &corev1.Container{
		Name:    "valkey",
		Command: []string{"valkey-server"},
		Args:    []string{"--cluster-announce-ip", "$(POD_IP)", "--requirepass", "$(PASSWORD)", "--maxmemory", "$(CFG_maxmemory)"},
		EnvFrom: []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		Env: []corev1.EnvVar{
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
			{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "auth"}, Key: "password"}}},
			{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "B"}}},
			{Name: "MISSING", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "x", Optional: &optional}}},
			{Name: "ADDR", Value: "$(POD_IP):6379"},
		},
	}
	res, err := Resolve(pod, c, Facts{PodIP: "172.29.0.9", HostIP: "172.29.0.1"}, lk)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"CFG_B=2", "CFG_maxmemory=100mb", "POD_IP=172.29.0.9", "POD_NAME=vc-abcde", "POD_NAMESPACE=ns1",
		"APP=valkey", "PASSWORD=s3cret", "B=2", "ADDR=172.29.0.9:6379",
	}, res.Env)
	assert.Equal(t, []string{"valkey-server"}, res.Command)
	assert.Equal(t, []string{"--cluster-announce-ip", "172.29.0.9", "--requirepass", "s3cret", "--maxmemory", "100mb"}, res.Args)
}

func TestResolveErrors(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	lk := fakeLookup{secrets: map[string]*corev1.Secret{"auth": {Data: map[string][]byte{}}}}
	for name, env := range map[string]corev1.EnvVar{
		"missing secret":    {Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "k"}}},
		"missing key":       {Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "auth"}, Key: "k"}}},
		"bad fieldRef":      {Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nope"}}},
		"missing configMap": {Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "k"}}},
	} {
		_, err := Resolve(pod, &corev1.Container{Env: []corev1.EnvVar{env}}, Facts{}, lk)
		assert.Error(t, err, name)
	}
}

// An optional reference leaves the variable unset whether the object or only the key is
// missing; the messages of required ones name the object and the key.
func TestResolveOptionalAndMessages(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	lk := fakeLookup{
		cms:     map[string]*corev1.ConfigMap{"cfg": {Data: map[string]string{"a": "1"}}},
		secrets: map[string]*corev1.Secret{"auth": {Data: map[string][]byte{}}},
	}
	yes := true
	cmKey := func(name, key string, opt *bool) corev1.EnvVar {
		return corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: opt}}}
	}
	res, err := Resolve(pod, &corev1.Container{
		Env:     []corev1.EnvVar{cmKey("cfg", "nokey", &yes), cmKey("gone", "a", &yes)},
		EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: &yes}}},
	}, Facts{}, lk)
	require.NoError(t, err)
	assert.Empty(t, res.Env)

	_, err = Resolve(pod, &corev1.Container{Env: []corev1.EnvVar{cmKey("cfg", "nokey", nil)}}, Facts{}, lk)
	assert.EqualError(t, err, `env X: configMap cfg has no key "nokey"`)
	_, err = Resolve(pod, &corev1.Container{EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}}}, Facts{}, lk)
	assert.ErrorContains(t, err, "envFrom configMap gone: ")
}

// In-cluster clients find the API server through KUBERNETES_SERVICE_HOST/PORT; a container's
// own setting of them wins, and without a known API server none is invented.
func TestResolveAPIServerVariables(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	api := netip.MustParseAddrPort("10.213.0.1:16443")
	for _, tc := range []struct {
		name  string
		facts Facts
		env   []corev1.EnvVar
		want  []string
		args  []string
	}{
		{name: "set from the node", facts: Facts{APIServer: api},
			want: []string{"KUBERNETES_SERVICE_HOST=10.213.0.1", "KUBERNETES_SERVICE_PORT=16443", "KUBERNETES_SERVICE_PORT_HTTPS=16443"},
			args: []string{"https://10.213.0.1:16443"}},
		{name: "the container's own value wins", facts: Facts{APIServer: api},
			env:  []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "api.example"}},
			want: []string{"KUBERNETES_SERVICE_HOST=api.example", "KUBERNETES_SERVICE_PORT=16443", "KUBERNETES_SERVICE_PORT_HTTPS=16443"},
			args: []string{"https://api.example:16443"}},
		{name: "no API server known", facts: Facts{},
			args: []string{"https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Resolve(pod, &corev1.Container{
				Env:  tc.env,
				Args: []string{"https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
			}, tc.facts, fakeLookup{})
			require.NoError(t, err)
			assert.Equal(t, tc.want, res.Env)
			assert.Equal(t, tc.args, res.Args)
		})
	}
}
