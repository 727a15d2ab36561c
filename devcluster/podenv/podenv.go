// Package podenv computes a container's environment and command line the way a
// kubelet does: envFrom, then env (later entries win), downward-API fieldRefs,
// ConfigMap and Secret keys, and $(VAR) expansion in values, command and args.
//
// The dev kubelet resolves these itself (instead of virtual-kubelet's
// resolver) because status.podIP must be the address the provider allocates
// before the container starts, which the API server does not know yet.
package podenv

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Lookup fetches the objects env entries may reference.
type Lookup interface {
	ConfigMap(namespace, name string) (*corev1.ConfigMap, error)
	Secret(namespace, name string) (*corev1.Secret, error)
}

// Facts are the pod values known only to the node.
type Facts struct {
	PodIP  string
	HostIP string
	// APIServer is where a pod reaches the API server; when set, every container gets the
	// KUBERNETES_SERVICE_HOST/PORT variables in-cluster clients read (client-go's
	// rest.InClusterConfig). A kubelet takes them from the default/kubernetes Service's
	// ClusterIP, which kube-proxy routes; the dev cluster has no kube-proxy, so they name the
	// API server's own address on the pod network (an address its serving certificate holds).
	APIServer netip.AddrPort
}

// Resolved is what the container runtime needs.
type Resolved struct {
	// Env as NAME=value, in definition order.
	Env     []string
	Command []string
	Args    []string
}

// Resolve computes the environment, command and args of container c in pod.
func Resolve(pod *corev1.Pod, c *corev1.Container, facts Facts, lookup Lookup) (Resolved, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}

	for _, from := range c.EnvFrom {
		data, err := envFromData(pod.Namespace, from, lookup)
		if err != nil {
			return Resolved{}, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(from.Prefix+k, data[k])
		}
	}

	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, Expand(e.Value, vars))
			continue
		}
		v, ok, err := valueFrom(pod, c, e.ValueFrom, facts, lookup)
		if err != nil {
			return Resolved{}, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}

	// The API server's variables come last and only where the container did not set them, as
	// a kubelet's service variables do.
	if facts.APIServer.IsValid() {
		for _, kv := range [][2]string{
			{"KUBERNETES_SERVICE_HOST", facts.APIServer.Addr().String()},
			{"KUBERNETES_SERVICE_PORT", strconv.Itoa(int(facts.APIServer.Port()))},
			{"KUBERNETES_SERVICE_PORT_HTTPS", strconv.Itoa(int(facts.APIServer.Port()))},
		} {
			if _, ok := vars[kv[0]]; !ok {
				set(kv[0], kv[1])
			}
		}
	}

	out := Resolved{}
	for _, k := range order {
		out.Env = append(out.Env, k+"="+vars[k])
	}
	for _, s := range c.Command {
		out.Command = append(out.Command, Expand(s, vars))
	}
	for _, s := range c.Args {
		out.Args = append(out.Args, Expand(s, vars))
	}
	return out, nil
}

func envFromData(ns string, from corev1.EnvFromSource, lookup Lookup) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		cm, found, err := Fetch(lookup.ConfigMap, ns, "envFrom configMap", from.ConfigMapRef.Name, from.ConfigMapRef.Optional)
		if !found {
			return nil, err
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		s, found, err := Fetch(lookup.Secret, ns, "envFrom secret", from.SecretRef.Name, from.SecretRef.Optional)
		if !found {
			return nil, err
		}
		out := make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

// Fetch gets the ConfigMap or Secret (what) namespace/name through get. found=false with a
// nil error means it is missing and the reference marks it optional: the caller leaves it
// out, as a kubelet does.
func Fetch[T any](get func(namespace, name string) (T, error), namespace, what, name string, opt *bool) (obj T, found bool, err error) {
	obj, err = get(namespace, name)
	switch {
	case err == nil:
		return obj, true, nil
	case optional(opt) && apierrors.IsNotFound(err):
		return obj, false, nil
	default:
		return obj, false, fmt.Errorf("%s %s: %w", what, name, err)
	}
}

// keyValue reads one key of a ConfigMap or Secret (what) for an env entry; ok=false means
// the object or the key is missing and the reference is optional.
func keyValue[T any, V string | []byte](get func(namespace, name string) (T, error), data func(T) map[string]V,
	namespace, what, name, key string, opt *bool) (string, bool, error) {
	obj, found, err := Fetch(get, namespace, what, name, opt)
	if !found {
		return "", false, err
	}
	v, ok := data(obj)[key]
	switch {
	case ok:
		return string(v), true, nil
	case optional(opt):
		return "", false, nil
	default:
		return "", false, fmt.Errorf("%s %s has no key %q", what, name, key)
	}
}

func secretData(s *corev1.Secret) map[string][]byte        { return s.Data }
func configMapData(cm *corev1.ConfigMap) map[string]string { return cm.Data }

// valueFrom returns the value of one env source; ok=false means an optional
// reference was missing and the variable is left unset.
func valueFrom(pod *corev1.Pod, c *corev1.Container, src *corev1.EnvVarSource, facts Facts, lookup Lookup) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := FieldValue(pod, src.FieldRef.FieldPath, facts)
		return v, err == nil, err
	case src.SecretKeyRef != nil:
		r := src.SecretKeyRef
		return keyValue(lookup.Secret, secretData, pod.Namespace, "secret", r.Name, r.Key, r.Optional)
	case src.ConfigMapKeyRef != nil:
		r := src.ConfigMapKeyRef
		return keyValue(lookup.ConfigMap, configMapData, pod.Namespace, "configMap", r.Name, r.Key, r.Optional)
	case src.ResourceFieldRef != nil:
		return resourceValue(c, src.ResourceFieldRef)
	}
	return "", false, fmt.Errorf("unsupported env source")
}

// FieldValue returns a downward-API field of pod, as fieldRef and downwardAPI
// volumes name it.
func FieldValue(pod *corev1.Pod, path string, facts Facts) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return facts.PodIP, nil
	case "status.hostIP", "status.hostIPs":
		return facts.HostIP, nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[path[len(prefix)+2:len(path)-2]], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return b.String()
}

func resourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, bool, error) {
	parts := strings.SplitN(ref.Resource, ".", 2)
	if len(parts) != 2 {
		return "", false, fmt.Errorf("unsupported resourceFieldRef %q", ref.Resource)
	}
	list := c.Resources.Limits
	if parts[0] == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(parts[1])]
	if !ok {
		return "0", true, nil
	}
	if !ref.Divisor.IsZero() {
		return fmt.Sprint((q.MilliValue() + ref.Divisor.MilliValue() - 1) / ref.Divisor.MilliValue()), true, nil
	}
	if parts[1] == "cpu" {
		return fmt.Sprint((q.MilliValue() + 999) / 1000), true, nil
	}
	return fmt.Sprint(q.Value()), true, nil
}

func optional(p *bool) bool { return p != nil && *p }

// Expand replaces $(NAME) with vars[NAME] following Kubernetes' rules: "$$"
// is an escaped "$", and a reference to an undefined variable is left as
// written.
func Expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
