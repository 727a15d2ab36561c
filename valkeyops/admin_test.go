package valkeyops

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

func TestNewAdminRequiresPassword(t *testing.T) {
	_, err := NewAdmin(Options{Credentials: Credentials{Username: model.OperatorUser}})
	assert.ErrorIs(t, err, model.ErrAuthRequired)
	var op *model.OpError
	assert.ErrorAs(t, err, &op)
}
