package kubectlvalkey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/views"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ErrRefused: the operator refused the request (its answer says why).
var ErrRefused = errors.New("refused")

// pollEvery is how often a request's answer and outcome are looked for.
const pollEvery = 300 * time.Millisecond

// Failover asks the operator to hand ValkeyNode node's slots to an in-sync replica of its
// shard, and waits (up to wait) for the answer and, once accepted, for the node to report
// itself a replica.
func (c *Client) Failover(ctx context.Context, ns, node string, wait time.Duration, out io.Writer) error {
	u, err := c.Dynamic.Resource(nodesResource).Namespace(ns).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cluster := views.Node{U: u}.Spec().Cluster
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := c.ask(ctx, ns, cluster, views.Request{Kind: views.RequestFailover, Node: node}, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "waiting for %s to become a replica...\n", node)
	for {
		u, err := c.Dynamic.Resource(nodesResource).Namespace(ns).Get(ctx, node, metav1.GetOptions{})
		if err == nil && (views.Node{U: u}).Status().Role == views.RoleReplica {
			fmt.Fprintf(out, "%s is a replica now\n", node)
			return nil
		}
		if err := sleep(ctx); err != nil {
			return fmt.Errorf("the failover was accepted but %s has not become a replica within %s; see `kubectl valkey status %s`", node, wait, cluster)
		}
	}
}

// Rebalance asks the operator to even out the slots of cluster; it returns once the operator
// answered (the move runs on, and `kubectl valkey status` shows it).
func (c *Client) Rebalance(ctx context.Context, ns, cluster string, wait time.Duration, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return c.ask(ctx, ns, cluster, views.Request{Kind: views.RequestRebalance}, out)
}

// ask sets the request annotation, unless a request stands already, and waits for the
// operator to take it away and answer.
func (c *Client) ask(ctx context.Context, ns, cluster string, req views.Request, out io.Writer) error {
	cl, err := c.cluster(ctx, ns, cluster)
	if err != nil {
		return err
	}
	if pending := cl.Request(); pending != "" {
		return fmt.Errorf("%w: request %q on %s is still waiting for the operator", ErrRefused, pending, cluster)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": cl.U.GetResourceVersion(),
		"annotations":     map[string]any{views.RequestAnnotation: req.String()},
	}})
	if err != nil {
		return err
	}
	if _, err := c.Dynamic.Resource(clustersResource).Namespace(ns).Patch(ctx, cluster, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("requesting %s: %w", req, err)
	}
	fmt.Fprintf(out, "requested %s on ValkeyCluster %s/%s\n", req, ns, cluster)
	for {
		cl, err := c.cluster(ctx, ns, cluster)
		if err == nil && cl.Request() == "" {
			verdict, _, why := views.ParseAnswer(cl.RequestAnswer())
			fmt.Fprintf(out, "operator: %s: %s\n", verdict, why)
			if verdict == views.AnswerRefused {
				return fmt.Errorf("%w: %s", ErrRefused, why)
			}
			return nil
		}
		if err := sleep(ctx); err != nil {
			return fmt.Errorf("the operator has not answered request %s within the wait (is it running? the request stays until it does)", req)
		}
	}
}

func sleep(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(pollEvery):
		return nil
	}
}
