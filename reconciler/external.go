package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// External access (spec.externalAccess; docs/external-access.md): every ValkeyNode gets a
// Service of its own, of type LoadBalancer or NodePort, selecting its pod by the node label,
// and its server announces that Service's address to clients only (announce.go): the
// cluster bus and replication stay on pod IPs, while CLUSTER SHARDS and redirects name an
// address a client outside the pod network can dial. Nothing of it enters a pod's spec or
// hash: the address exists only once the Service has one, after the pod is made, so it is
// set live, and turning the feature on or off replaces no pod.
//
// ensureExternal keeps the Services and reads what each offers into the pass; it runs in
// Creating and Active (a forming cluster's nodes get their Services early, so an address is
// usually there by the time a node serves slots). With the feature off, Services left from
// when it was on stay until every member is known to announce nothing (the announce concern
// clears them), then go. Its Event reasons are in events.go.

// ensureExternal applies each node's external Service while spec.externalAccess is on,
// gives pods made before the node label existed that label (their Service selects by it),
// records each node's external address in p.external, and deletes the Services of nodes
// that are gone, or all of them once the feature is off and no server announces one.
func (r *Reconciler) ensureExternal(ctx context.Context, p *pass) *outcome {
	ea := p.cluster.ExternalAccess()
	existing, err := r.externalServices(ctx, p)
	if err != nil {
		return done(ctrl.Result{}, err)
	}
	p.external = map[string]model.ClientAddress{}
	keep := map[string]bool{}
	if ea == nil {
		p.settle(ReasonExternalRefused)
		if len(existing) > 0 && p.state == views.StateActive && !r.announcesCleared(p) {
			p.externalClear = true
			for name := range existing {
				keep[name] = true
			}
		}
	} else {
		var refused []string
		for _, n := range p.nodes {
			if ea.Type == views.ExternalNodePort && !model.AnnouncesClientPort(n.Spec().Version) {
				refused = append(refused, fmt.Sprintf("%s runs Valkey %s", n.Name(), n.Spec().Version))
				continue
			}
			keep[n.Name()] = true
			svc, out := r.applyExternalService(ctx, p, n.Name(), *ea)
			if out != nil {
				return out
			}
			if err := r.labelPodForService(ctx, p, n.Name()); err != nil {
				return done(ctrl.Result{}, err)
			}
			addr, why := render.ExternalAddress(svc, p.pods[n.Name()], p.nodeAddrs)
			if why != "" {
				refused = append(refused, n.Name()+": "+why)
			}
			if addr.IP != "" {
				p.external[n.Name()] = addr
			}
		}
		if len(refused) > 0 {
			p.raise(ReasonExternalRefused, "ExternalAccess", externalRefusal(ea.Type, refused))
		} else {
			p.settle(ReasonExternalRefused)
		}
	}
	for name, svc := range existing {
		if keep[name] {
			continue
		}
		if err := r.client.Delete(ctx, svc, client.Preconditions{UID: &svc.UID}); err != nil && !apierrors.IsNotFound(err) {
			return done(ctrl.Result{}, err)
		}
		p.log.Info("deleted external Service", "name", name)
	}
	return nil
}

// externalRefusal is the ExternalAccessRefused message: what is refused and why.
func externalRefusal(kind string, refused []string) string {
	slices.Sort(refused)
	if kind == views.ExternalNodePort {
		return "spec.externalAccess type NodePort needs Valkey 9.0 or later, whose servers can announce a client port of their own " +
			"(cluster-announce-client-port; Valkey 8 has only the client IP): use type LoadBalancer (port 6379 on its own address) " +
			"or a 9.x ValkeyImage; no external address for: " + strings.Join(refused, "; ")
	}
	return "no external address for: " + strings.Join(refused, "; ")
}

// externalServices are the cluster's external Services by name: labelled with a node and
// controlled by the cluster (the headless Service has no node label).
func (r *Reconciler) externalServices(ctx context.Context, p *pass) (map[string]*corev1.Service, error) {
	list := &corev1.ServiceList{}
	if err := r.client.List(ctx, list, client.InNamespace(p.key.Namespace),
		client.MatchingLabels{render.LabelCluster: p.key.Name}, client.HasLabels{render.LabelNode}); err != nil {
		return nil, err
	}
	out := map[string]*corev1.Service{}
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], p.obj) {
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out, nil
}

// applyExternalService keeps node's external Service and returns it as stored.
func (r *Reconciler) applyExternalService(ctx context.Context, p *pass, node string, ea views.ExternalAccess) (*corev1.Service, *outcome) {
	live := &corev1.Service{}
	err := apply(ctx, r, p, owned[*corev1.Service, *corev1ac.ServiceApplyConfiguration]{
		kind: "ExternalService", name: render.ExternalServiceName(node), live: live,
		desire: func(bool) (*corev1ac.ServiceApplyConfiguration, error) {
			return render.ExternalService(p.key.Name, node, p.key.Namespace, ea).WithOwnerReferences(p.clusterOwner()), nil
		},
		extract: corev1ac.ExtractService,
	})
	return live, r.applied(p, "ExternalService", err)
}

// labelPodForService gives node's pod the node label its Service selects by, if it lacks it
// (a pod made before pods carried it): a label patch, the pod keeps running.
func (r *Reconciler) labelPodForService(ctx context.Context, p *pass, node string) error {
	pod := p.pods[node]
	if pod == nil || pod.DeletionTimestamp != nil || pod.Labels[render.LabelNode] == node {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{render.LabelNode: node}}})
	if err != nil {
		return err
	}
	if err := r.client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	p.log.Info("labelled pod for its external Service", "pod", node)
	return nil
}
