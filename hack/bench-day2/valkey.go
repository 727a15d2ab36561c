package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// clusterClient is a cluster-mode client authenticating as the default user. It gives up on
// a connection that has not answered for clientDeadAfter (valkey-go's default is 10 s): how
// soon a client writes again after a crash depends on that as much as on the failover.
func clusterClient(addrs []string, password string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: addrs, Password: password, DisableCache: true,
		Dialer: net.Dialer{Timeout: clientDeadAfter}, ConnWriteTimeout: clientDeadAfter})
}

// clientDeadAfter is how long the benchmark's cluster clients wait on a silent connection
// (or a connect) before they drop it and refresh the topology.
const clientDeadAfter = 2 * time.Second

// defaultClusterClient is a cluster-mode client with valkey-go's default timeouts (a silent
// connection is dropped after ConnWriteTimeout's default, 10 s): what an application that
// tuned nothing sees after a crash. Client-side caching is off as on every other client here.
func defaultClusterClient(addrs []string, password string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: addrs, Password: password, DisableCache: true})
}

// nodeClient talks to exactly one server.
func nodeClient(addr, password string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, Password: password, ForceSingleClient: true,
		DisableCache: true, Dialer: net.Dialer{Timeout: 5 * time.Second}})
}

// clusterNodes is one server's CLUSTER NODES, parsed.
func clusterNodes(ctx context.Context, addr, password string) ([]model.ClusterNode, error) {
	c, err := nodeClient(addr, password)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	text, err := c.Do(ctx, c.B().ClusterNodes().Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
	}
	return model.ParseClusterNodes(text)
}

func dbsize(ctx context.Context, addr, password string) (int64, error) {
	c, err := nodeClient(addr, password)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
}

// configGet reads one parameter of one server, as the operator's user.
func configGet(ctx context.Context, addr, operatorPassword, name string) (string, error) {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, Username: model.OperatorUser, Password: operatorPassword,
		ForceSingleClient: true, DisableCache: true, Dialer: net.Dialer{Timeout: 5 * time.Second}})
	if err != nil {
		return "", err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := c.Do(ctx, c.B().ConfigGet().Parameter(name).Build()).AsStrMap()
	if err != nil {
		return "", fmt.Errorf("CONFIG GET %s on %s: %w", name, addr, err)
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s on %s: no such parameter", name, addr)
	}
	return v, nil
}

func fillValue(i int) string {
	s := strconv.Itoa(i)
	for len(s) < *valueBytes {
		s = "0" + s
	}
	return s
}

// fill writes keys k:0..n-1, padded to --value-bytes, through the cluster client.
func fill(ctx context.Context, c valkey.Client, n int) error {
	return loadgen.Fill(ctx, c, "k:", n, 5000, fillValue)
}

// sumDBSize adds up DBSIZE over the primaries that hold slots in view.
func sumDBSize(ctx context.Context, view []model.ClusterNode, password string) (int64, error) {
	var total int64
	for _, n := range view {
		if !n.IsPrimary() || len(n.Slots) == 0 || n.Failing() {
			continue
		}
		k, err := dbsize(ctx, n.Addr(), password)
		if err != nil {
			return 0, err
		}
		total += k
	}
	return total, nil
}

// operatorClient talks to one server as the operator's user.
func operatorClient(ip, operatorPw string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{net.JoinHostPort(ip, "6379")}, Username: model.OperatorUser,
		Password: operatorPw, ForceSingleClient: true, DisableCache: true, Dialer: net.Dialer{Timeout: 2 * time.Second}})
}

// serverRole is ROLE's first element: master or slave.
func serverRole(ctx context.Context, ip, operatorPw string) (string, error) {
	c, err := operatorClient(ip, operatorPw)
	if err != nil {
		return "", err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	role, err := c.Do(ctx, c.B().Role().Build()).ToArray()
	if err != nil || len(role) == 0 {
		return "", fmt.Errorf("ROLE on %s: %v", ip, err)
	}
	return role[0].ToString()
}

// failoverTo runs CLUSTER FAILOVER on the replica at ip and waits until it is primary.
func failoverTo(ctx context.Context, ip, operatorPw string) error {
	c, err := operatorClient(ip, operatorPw)
	if err != nil {
		return err
	}
	defer c.Close()
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = c.Do(fctx, c.B().ClusterFailover().Build()).Error()
	cancel()
	if err != nil {
		return err
	}
	return poll.Until(ctx, 100*time.Millisecond, 30*time.Second, ip+" primary", func(ctx context.Context) (bool, string, error) {
		role, err := serverRole(ctx, ip, operatorPw)
		return err == nil && role == "master", role, nil
	})
}
