package model

import (
	"errors"
	"fmt"
)

// OpError is the error every valkeyops.Admin operation (and ValidateACL and CheckCommands
// here) returns when a step fails on a node. Callers use errors.As to learn which node and
// which step failed instead of matching strings.
type OpError struct {
	Node string // node name (or address/ID when no name is known)
	Step string // e.g. "dial", "observe", "meet", "addslots", "migrate", "failover-wait"
	Err  error
}

func (e *OpError) Error() string {
	if e.Node == "" {
		return fmt.Sprintf("valkeyops %s: %v", e.Step, e.Err)
	}
	return fmt.Sprintf("valkeyops %s on %s: %v", e.Step, e.Node, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// NewOpError wraps err as the OpError of step on node; nil stays nil, so a step's result can be
// wrapped whether it failed or not.
func NewOpError(node, step string, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Node: node, Step: step, Err: err}
}

var (
	// ErrNoInSyncReplica means a graceful failover was refused because no replica of the
	// primary is linked and caught up; failing over anyway could lose acknowledged writes.
	ErrNoInSyncReplica = errors.New("no in-sync replica")
	// ErrAuthRequired means Options.Password was empty: the operator never talks to Valkey
	// without authenticating.
	ErrAuthRequired = errors.New("a password is required: auth is always on")
	// ErrUnreachable means a node needed by the operation could not be reached.
	ErrUnreachable = errors.New("node unreachable")
	// ErrNotConverged means the cluster did not reach the expected state before the deadline.
	ErrNotConverged = errors.New("cluster did not converge")
	// ErrUnsafe means the operation was refused because doing it would risk data (for example
	// turning a node that owns slots into a replica, or moving slots while the cluster is failing).
	ErrUnsafe = errors.New("refused: unsafe")
	// ErrUnsupported means the server's release does not have the setting or command asked
	// for (availability-zone before Valkey 8.0).
	ErrUnsupported = errors.New("not supported by this server's release")
	// ErrInvalidSpec means caller input (nodes, shard counts, ACL spec) is invalid.
	ErrInvalidSpec = errors.New("invalid input")
	// ErrUntrustedCertificate means a server presented a certificate that does not verify
	// against the credentials' CA bundle under their server name. During a CA change the
	// bundle must hold the old and the new CA until every node serves a certificate of the new
	// one.
	ErrUntrustedCertificate = errors.New("served certificate not trusted")
)
