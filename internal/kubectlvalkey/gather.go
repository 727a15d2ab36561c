package kubectlvalkey

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// Resources the plugin reads through the dynamic client (the CRDs have no Go types).
var (
	clustersResource = schema.GroupVersionResource{Group: crds.Group, Version: crds.Version, Resource: "valkeyclusters"}
	nodesResource    = schema.GroupVersionResource{Group: crds.Group, Version: crds.Version, Resource: "valkeynodes"}
)

// zoneLabel is the well-known label of a Kubernetes node's zone.
const zoneLabel = "topology.kubernetes.io/zone"

// execTimeout bounds one server's valkey-cli run.
const execTimeout = 15 * time.Second

// Client is the plugin's access to the API server, as the user.
type Client struct {
	Config  *rest.Config
	Dynamic dynamic.Interface
	Core    kubernetes.Interface
	// Now is the clock (tests fix it).
	Now func() time.Time
}

// NewClient builds a Client from a rest.Config (the user's kubeconfig).
func NewClient(cfg *rest.Config) (*Client, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{Config: cfg, Dynamic: dyn, Core: core, Now: time.Now}, nil
}

// cluster reads a ValkeyCluster.
func (c *Client) cluster(ctx context.Context, ns, name string) (views.Cluster, error) {
	u, err := c.Dynamic.Resource(clustersResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return views.Cluster{}, err
	}
	return views.Cluster{U: u}, nil
}

// nodes lists the cluster's ValkeyNodes, by shard then name.
func (c *Client) nodes(ctx context.Context, ns, cluster string) ([]views.Node, error) {
	list, err := c.Dynamic.Resource(nodesResource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster})
	if err != nil {
		return nil, err
	}
	var out []views.Node
	for i := range list.Items {
		n := views.Node{U: &list.Items[i]}
		if n.Spec().Cluster == cluster {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Shard() != out[j].Shard() {
			return out[i].Shard() < out[j].Shard()
		}
		return out[i].Name() < out[j].Name()
	})
	return out, nil
}

// Status gathers the report of cluster ns/name.
func (c *Client) Status(ctx context.Context, ns, name string) (*Report, error) {
	cl, err := c.cluster(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	st := cl.Status()
	r := &Report{Cluster: name, Namespace: ns, State: st.State, Message: st.Message,
		Desired: Topology{Shards: cl.Shards(), ReplicasPerShard: cl.ReplicasPerShard()}}
	nodes, err := c.nodes(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	var services map[string]*corev1.Service
	var servicesErr error
	if cl.ExternalAccess() != nil {
		services, servicesErr = c.externalServices(ctx, ns, name)
	}
	pods := map[string]*corev1.Pod{}
	k8sNodes := map[string]*corev1.Node{} // by name; nil when unreadable
	nodeAddrs := map[string]string{}      // render.NodeAddress of each readable one
	for _, n := range nodes {
		nr := NodeReport{Name: n.Name(), Shard: n.Shard(), Lifecycle: n.Status().Lifecycle, IP: n.Status().PodIP}
		pod, err := c.Core.CoreV1().Pods(ns).Get(ctx, n.Name(), metav1.GetOptions{})
		if err == nil {
			pods[n.Name()] = pod
			nr.Pod, nr.Node = pod.Name, pod.Spec.NodeName
			if pod.Status.PodIP != "" {
				nr.IP = pod.Status.PodIP
			}
			if _, seen := k8sNodes[nr.Node]; !seen && nr.Node != "" {
				// No right to read nodes: the zone (and a NodePort's address) stays unknown.
				k, _ := c.Core.CoreV1().Nodes().Get(ctx, nr.Node, metav1.GetOptions{})
				k8sNodes[nr.Node] = k
				if k != nil {
					nodeAddrs[nr.Node] = render.NodeAddress(k)
				}
			}
			if k := k8sNodes[nr.Node]; k != nil {
				nr.Zone = k.Labels[zoneLabel]
			}
		} else {
			pod = nil
		}
		if cl.ExternalAccess() != nil {
			nr.External = externalAddress(services[render.ExternalServiceName(n.Name())], servicesErr, pod, nodeAddrs)
		}
		r.Nodes = append(r.Nodes, nr)
	}
	states, errs, live := c.live(ctx, cl, nodes, pods)
	r.Live = live
	r.Served(states, errs)
	r.Actions, r.Warnings = c.events(ctx, ns, name)
	if ref := cl.TLSSecretRef(); ref != "" {
		r.TLS = c.certificate(ctx, ns, ref)
	}
	return r, nil
}

// externalServices lists the cluster's external Services (one per node, labelled with it) in
// one call, by name.
func (c *Client) externalServices(ctx context.Context, ns, cluster string) (map[string]*corev1.Service, error) {
	list, err := c.Core.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster + "," + render.LabelNode})
	if err != nil {
		return nil, err
	}
	out := make(map[string]*corev1.Service, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// externalAddress is the client address a node's external Service svc offers (the one its
// server is told to announce, as the operator computes it), or why there is none; listErr is
// why the Services could not be listed.
func externalAddress(svc *corev1.Service, listErr error, pod *corev1.Pod, nodeAddrs map[string]string) string {
	switch {
	case listErr != nil:
		return "? (Services " + reason(listErr) + ")"
	case svc == nil:
		return "? (Service not found)"
	}
	addr, why := render.ExternalAddress(svc, pod, nodeAddrs)
	switch {
	case why != "":
		return "? (" + why + ")"
	case addr.IP == "":
		return "pending"
	}
	return addr.String()
}

// live runs LiveScript in every running server's container, at once; it says which path it
// took, or why there is no live data.
func (c *Client) live(ctx context.Context, cl views.Cluster, nodes []views.Node, pods map[string]*corev1.Pod) (map[string]*model.NodeState, map[string]error, string) {
	states, errs := map[string]*model.NodeState{}, map[string]error{}
	if !cl.DefaultUserOn() {
		return states, errs, "unavailable: the cluster's default user is off, so no application password logs in (operator status only)"
	}
	secret := render.AuthSecretName(cl.Name())
	s, err := c.Core.CoreV1().Secrets(cl.Namespace()).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		return states, errs, fmt.Sprintf("unavailable: reading Secret %s: %v (operator status only)", secret, reason(err))
	}
	password := string(s.Data[render.AuthPasswordKey])
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		pod := pods[n.Name()]
		if pod == nil || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
			continue
		}
		wg.Go(func() {
			st, err := c.observe(ctx, pod, cl.TLSEnabled(), password, n.Shard())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[n.Name()] = err
				return
			}
			states[n.Name()] = &st
		})
	}
	wg.Wait()
	return states, errs, fmt.Sprintf("valkey-cli in each pod (pods/exec), as the default user with the password of Secret %s; read-only commands", secret)
}

// reason shortens an API error to its status reason where it has one.
func reason(err error) string {
	if apierrors.IsForbidden(err) {
		return "forbidden"
	}
	if apierrors.IsNotFound(err) {
		return "not found"
	}
	return err.Error()
}

// observe runs valkey-cli in the server's container against its own pod IP.
func (c *Client) observe(ctx context.Context, pod *corev1.Pod, tls bool, password string, shard int) (model.NodeState, error) {
	cmd := []string{"valkey-cli", "-h", pod.Status.PodIP, "-p", fmt.Sprint(render.ClientPort)}
	if tls {
		cmd = append(cmd, "--tls", "--cacert", render.TLSDir+"/ca.crt")
	}
	out, err := c.exec(ctx, pod, cmd, LiveScript(password))
	if err != nil {
		return model.NodeState{}, err
	}
	return ParseLive(model.Node{Name: pod.Name, Addr: fmt.Sprintf("%s:%d", pod.Status.PodIP, render.ClientPort), Shard: shard}, out)
}

// exec runs cmd in the pod's Valkey container with stdin, returning its stdout.
func (c *Client) exec(ctx context.Context, pod *corev1.Pod, cmd []string, stdin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	req := c.Core.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: render.ContainerName, Command: cmd, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.Config, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool { return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err) })
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return "", fmt.Errorf("pods/exec forbidden")
		}
		return "", fmt.Errorf("exec valkey-cli: %w (%s)", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// topologyReasons are the Event reasons of topology actions, requests and announced client
// addresses (the reconciler's).
var topologyReasons = map[string]bool{"TopologyAction": true, "Request": true, "RequestRefused": true, "Bootstrap": true, "ClusterFormed": true, "NodeRetired": true, "StateChanged": true, "ClientAddressAnnounced": true}

// recentWarnings is how far back a Warning counts as standing: the operator repeats a
// Warning whose condition stands only when its message changes, so its age is no proof it
// cleared; an hour is the API server's default Event lifetime.
const recentWarnings = time.Hour

// keptEvents is how many of each list the report shows.
const keptEvents = 5

// events are the cluster's last topology actions and its recent Warnings, oldest first.
func (c *Client) events(ctx context.Context, ns, name string) (actions, warnings []Event) {
	list, err := c.Core.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=" + crds.KindCluster + ",involvedObject.name=" + name})
	if err != nil {
		return nil, nil
	}
	var all []Event
	for _, e := range list.Items {
		all = append(all, eventOf(e))
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	for _, e := range all {
		switch {
		case e.Type == corev1.EventTypeWarning && c.Now().Sub(e.Time) <= recentWarnings:
			warnings = append(warnings, e)
		case e.Type != corev1.EventTypeWarning && topologyReasons[e.Reason]:
			actions = append(actions, e)
		}
	}
	return lastN(actions, keptEvents), lastN(warnings, keptEvents)
}

// eventOf reads a core/v1 Event written through events.k8s.io or core/v1: its last time is
// the series' last observation, the event time, or the last timestamp.
func eventOf(e corev1.Event) Event {
	out := Event{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count, Time: e.LastTimestamp.Time}
	if t := e.EventTime.Time; t.After(out.Time) {
		out.Time = t
	}
	if s := e.Series; s != nil {
		out.Count = s.Count
		if t := s.LastObservedTime.Time; t.After(out.Time) {
			out.Time = t
		}
	}
	return out
}

func lastN[T any](s []T, n int) []T {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// certificate reads the TLS Secret's leaf certificate expiry (tls.crt holds no secret).
func (c *Client) certificate(ctx context.Context, ns, secret string) *TLSReport {
	out := &TLSReport{Secret: secret}
	s, err := c.Core.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		out.Error = reason(err)
		return out
	}
	notAfter, err := leafNotAfter(s.Data[corev1.TLSCertKey])
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.NotAfter = notAfter
	return out
}

// leafNotAfter is the expiry of the first certificate of a PEM bundle.
func leafNotAfter(pemData []byte) (time.Time, error) {
	block, _ := pem.Decode(pemData)
	if block == nil {
		return time.Time{}, errors.New("tls.crt holds no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}, err
	}
	return cert.NotAfter, nil
}
