package valkeyops

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Commands reads node n's command table (COMMAND): every command and its subcommands, in the
// form of the embedded tables (model.KnownCommands) the integration suite compares it with.
func (a *Admin) Commands(ctx context.Context, n model.Node) (model.CommandTable, error) {
	msg, err := a.cmd(ctx, n, "command", "COMMAND")
	if err != nil {
		return nil, err
	}
	list, err := msg.ToArray()
	if err != nil {
		return nil, model.NewOpError(n.Name, "command", err)
	}
	t := model.CommandTable{}
	for _, info := range list {
		fields, err := info.ToArray()
		if err != nil || len(fields) < 10 {
			return nil, model.NewOpError(n.Name, "command", fmt.Errorf("unexpected COMMAND entry: %v", err))
		}
		name, err := fields[0].ToString()
		if err != nil {
			return nil, model.NewOpError(n.Name, "command", err)
		}
		subs := []string{}
		subList, _ := fields[9].ToArray()
		for _, s := range subList {
			sf, err := s.ToArray()
			if err != nil || len(sf) == 0 {
				continue
			}
			full, _ := sf[0].ToString()
			if _, sub, ok := strings.Cut(strings.ToLower(full), "|"); ok {
				subs = append(subs, sub)
			}
		}
		slices.Sort(subs)
		t[strings.ToLower(name)] = subs
	}
	return t, nil
}
