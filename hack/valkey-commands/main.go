// Command valkey-commands writes the command table of a running Valkey server (COMMAND) as a
// command file of valkeyops/model/commands. hack/valkey-commands.sh runs it against each
// local image.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "server address")
	password := flag.String("password", "commands", "the default user's password")
	out := flag.String("out", "", "file to write")
	flag.Parse()
	if err := run(*addr, *password, *out); err != nil {
		fmt.Fprintln(os.Stderr, "valkey-commands:", err)
		os.Exit(1)
	}
}

func run(addr, password, out string) error {
	admin, err := valkeyops.NewAdmin(valkeyops.Options{Credentials: valkeyops.Credentials{Username: "default", Password: password}})
	if err != nil {
		return err
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := admin.Commands(ctx, model.Node{Name: addr, Addr: addr})
	if err != nil {
		return err
	}
	return os.WriteFile(out, []byte(t.Format()), 0o644)
}
