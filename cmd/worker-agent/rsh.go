package main

import (
	"context"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/podmpi/podmpi/agent/exitcode"
	"github.com/podmpi/podmpi/agent/rsh"
)

// RshName is the name under which worker-agent acts as the rsh client
// (a symlink podmpi-rsh -> worker-agent): Open MPI's tree spawn makes
// workers start daemons on other workers through plm_rsh_agent.
const RshName = "podmpi-rsh"

func isRshName(argv0 string) bool { return filepath.Base(argv0) == RshName }

func runRsh(ctx context.Context, args []string, env func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) exitcode.Code {
	return exitcode.Code(rsh.Main(ctx, args, env, stdin, stdout, stderr))
}

// newRshCmd is `worker-agent rsh ...`: every argument goes to the rsh
// client unparsed, as mpirun passes ssh(1) arguments.
func newRshCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:                "rsh [ssh options] [user@]host command...",
		Short:              "ssh-compatible client for mpirun's remote daemons (job key, host key pinned to id_rsa.pub)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.code = runRsh(cmd.Context(), args, o.env, o.stdin, o.stdout, o.stderr)
			return nil
		},
	}
}
