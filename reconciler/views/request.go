package views

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/gomomento/valkey-operator/crds"
)

// RequestAnnotation is the one annotation of a ValkeyCluster through which a user asks the
// operator for a topology action (`kubectl valkey failover`, `kubectl valkey rebalance`).
// ValkeyNodes are read-only for users, so a request always lands on the cluster. The
// operator removes it when it answers (an Event says how), so at most one request stands.
const RequestAnnotation = crds.Group + "/request"

// Request kinds, the annotation's values: "failover:NODE" and "rebalance".
const (
	RequestFailover  = "failover"
	RequestRebalance = "rebalance"
)

// Request is a parsed RequestAnnotation.
type Request struct {
	Kind string
	// Node is the ValkeyNode whose primary role a failover hands to one of its replicas.
	Node string
}

// nodeName is a ValkeyNode name: a DNS-1123 label (its pod has the same name).
var nodeName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ParseRequest reads an annotation value; an error names what is wrong with it.
func ParseRequest(s string) (Request, error) {
	kind, node, hasNode := strings.Cut(s, ":")
	switch {
	case kind == RequestRebalance && !hasNode:
		return Request{Kind: RequestRebalance}, nil
	case kind == RequestFailover && nodeName.MatchString(node):
		return Request{Kind: RequestFailover, Node: node}, nil
	}
	return Request{}, fmt.Errorf("request %q is neither %q nor %q", s, RequestRebalance, RequestFailover+":NODE")
}

// String is the annotation value of r.
func (r Request) String() string {
	if r.Kind == RequestFailover {
		return RequestFailover + ":" + r.Node
	}
	return r.Kind
}

// Request is the raw value of the request annotation, "" when none stands.
func (c Cluster) Request() string { return c.U.GetAnnotations()[RequestAnnotation] }

// RequestAnswerAnnotation holds the operator's answer to the last request, written in the
// same patch that removes RequestAnnotation: "VERDICT: request: why". An Event says the same
// for people; the annotation is what `kubectl valkey` waits for, since events.k8s.io folds a
// repeated Event into a series it reports only minutes later.
const RequestAnswerAnnotation = crds.Group + "/request-answer"

// Verdicts of an answer.
const (
	AnswerAccepted = "accepted" // the action is carried out now
	AnswerRefused  = "refused"  // nothing was done, and why
	AnswerNothing  = "nothing"  // nothing needed doing (a balanced cluster)
)

// FormatAnswer is the RequestAnswerAnnotation value for request raw.
func FormatAnswer(verdict, raw, why string) string {
	return verdict + ": " + raw + ": " + why
}

// ParseAnswer splits a RequestAnswerAnnotation value into its verdict, request and reason.
func ParseAnswer(s string) (verdict, raw, why string) {
	verdict, rest, _ := strings.Cut(s, ": ")
	raw, why, _ = strings.Cut(rest, ": ")
	return verdict, raw, why
}

// RequestAnswer is the raw RequestAnswerAnnotation value, "" when none was written.
func (c Cluster) RequestAnswer() string { return c.U.GetAnnotations()[RequestAnswerAnnotation] }

// SetRequest sets the request annotation to raw ("" removes it), as `kubectl valkey` does
// with a patch; for tests and tools that edit a whole object.
func (c Cluster) SetRequest(raw string) {
	a := c.U.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	if raw == "" {
		delete(a, RequestAnnotation)
	} else {
		a[RequestAnnotation] = raw
	}
	c.U.SetAnnotations(a)
}
