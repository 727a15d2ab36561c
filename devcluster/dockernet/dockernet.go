// Package dockernet owns the Docker objects of one dev cluster instance: its
// user-defined bridge network and the labels that mark every container the
// dev kubelet creates, so that tearing an instance down removes exactly what
// it made and nothing else.
package dockernet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/gomomento/valkey-operator/internal/poll"
)

// Labels on every container and network a dev cluster creates.
const (
	LabelManaged      = "valkey-operator.dev"
	LabelInstance     = "valkey-operator.dev/instance"
	LabelNode         = "valkey-operator.dev/node"
	LabelPodNamespace = "valkey-operator.dev/pod-namespace"
	LabelPodName      = "valkey-operator.dev/pod-name"
	LabelPodUID       = "valkey-operator.dev/pod-uid"
	LabelContainer    = "valkey-operator.dev/container"
	LabelPodIP        = "valkey-operator.dev/pod-ip"
)

// NewClient connects to the local Docker engine (DOCKER_HOST honoured) and
// negotiates the API version, since the engine here is older than the client.
func NewClient() (*client.Client, error) {
	return client.New(client.FromEnv)
}

// NetworkName is the Docker network of instance.
func NetworkName(instance string) string { return "valkey-operator-" + instance }

// Network describes the instance's bridge network.
type Network struct {
	ID      string
	Name    string
	Subnet  netip.Prefix
	Gateway netip.Addr
}

// EnsureNetwork returns the instance's network, creating it when missing. A
// subnet must be set explicitly for Docker to accept static container
// addresses; candidates are tried until one does not overlap an existing
// network.
func EnsureNetwork(ctx context.Context, cli *client.Client, instance string) (Network, error) {
	name := NetworkName(instance)
	if n, err := inspect(ctx, cli, name); err == nil {
		return n, nil
	} else if !cerrdefs.IsNotFound(err) {
		return Network{}, err
	}
	var lastErr error
	for _, subnet := range candidateSubnets() {
		gw := subnet.Addr().Next()
		_, err := cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
			Driver: "bridge",
			IPAM:   &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet, Gateway: gw}}},
			Labels: map[string]string{LabelManaged: "1", LabelInstance: instance},
		})
		if err == nil {
			return inspect(ctx, cli, name)
		}
		if cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already exists") {
			return inspect(ctx, cli, name) // created concurrently
		}
		lastErr = err
		if !strings.Contains(err.Error(), "overlap") {
			return Network{}, fmt.Errorf("create docker network %s: %w", name, err)
		}
	}
	return Network{}, fmt.Errorf("create docker network %s: no free subnet: %w", name, lastErr)
}

// candidateSubnets are /24s in 10.213.0.0/16, outside Docker's default
// address pools (172.17-31.0.0/16, 192.168.0.0/16), so networks other tools
// create (testcontainers, compose) do not collide with ours.
func candidateSubnets() []netip.Prefix {
	var out []netip.Prefix
	for i := 0; i < 256; i++ {
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, byte(i), 0}), 24))
	}
	return out
}

func inspect(ctx context.Context, cli *client.Client, name string) (Network, error) {
	res, err := cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err != nil {
		return Network{}, err
	}
	n := Network{ID: res.Network.ID, Name: res.Network.Name}
	for _, c := range res.Network.IPAM.Config {
		if c.Subnet.Addr().Is4() {
			n.Subnet, n.Gateway = c.Subnet, c.Gateway
			break
		}
	}
	if !n.Subnet.IsValid() {
		return Network{}, fmt.Errorf("docker network %s has no IPv4 subnet", name)
	}
	if !n.Gateway.IsValid() {
		n.Gateway = n.Subnet.Masked().Addr().Next()
	}
	return n, nil
}

// InstanceFilter selects the Docker objects of instance.
func InstanceFilter(instance string) client.Filters {
	return client.Filters{}.Add("label", LabelManaged+"=1", LabelInstance+"="+instance)
}

// RemoveContainers force-removes every container of instance.
func RemoveContainers(ctx context.Context, cli *client.Client, instance string) error {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: InstanceFilter(instance)})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	var errs []error
	for _, c := range list.Items {
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.ID[:12], err))
		}
	}
	return errors.Join(errs...)
}

// RemoveAll force-removes every container of instance and then its network.
func RemoveAll(ctx context.Context, cli *client.Client, instance string) error {
	var errs []error
	if err := RemoveContainers(ctx, cli, instance); err != nil {
		errs = append(errs, err)
	}
	nets, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: InstanceFilter(instance)})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list networks: %w", err))...)
	}
	for _, n := range nets.Items {
		// A container removal can take a moment to release its endpoint.
		err := poll.Until(ctx, 200*time.Millisecond, 10*time.Second, "remove network "+n.Name, func(ctx context.Context) (bool, string, error) {
			_, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
			if err == nil || cerrdefs.IsNotFound(err) {
				return true, "", nil
			}
			return false, err.Error(), nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
