package mpirun

import (
	"slices"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/hostfile"
	"github.com/podmpi/podmpi/mpi"
)

func TestRankHosts(t *testing.T) {
	const hf = "/tmp/podmpi-x/hostfile"
	hosts := []hostfile.Host{{Name: "tj-launcher-0-0.tj", Slots: 2}, {Name: "tj-node-0-0.tj", Slots: 2}, {Name: "tj-node-0-1.tj", Slots: 2},
		{Name: "tj-node-0-2.tj", Slots: 2}}
	wired := []string{"OMPI_MCA_orte_default_hostfile=" + hf, "OMPI_MCA_btl_tcp_if_include=eth0"}
	all := []string{"tj-launcher-0-0.tj", "tj-launcher-0-0.tj", "tj-node-0-0.tj", "tj-node-0-0.tj", "tj-node-0-1.tj", "tj-node-0-1.tj",
		"tj-node-0-2.tj", "tj-node-0-2.tj"}
	for _, tc := range []struct {
		impl mpi.Implementation
		cmd  string
		env  []string
		want []string
	}{
		// The Trainer SDK's command with the -np the launcher adds.
		{mpi.OpenMPI4, "mpirun -np 8 --hostfile " + hf + " bash -c exit", nil, all},
		{mpi.OpenMPI4, "mpirun -np 8 bash -c exit", wired, all},
		{mpi.OpenMPI4, "mpirun -np 5 -x NCCL_DEBUG --mca btl tcp,self --bind-to none --tag-output python3 train.py --map-by node", wired, all[:5]},
		{mpi.OpenMPI5, "mpirun -np 8 ./a", []string{"PRTE_MCA_prte_default_hostfile=" + hf, "OMPI_MCA_orte_default_hostfile=" + hf}, all},
		{mpi.OpenMPI4, "mpirun -np 9 ./a", wired, nil},                                      // more ranks than slots: it wraps
		{mpi.OpenMPI4, "mpirun -np 8 --map-by node ./a", wired, nil},                        // another mapping
		{mpi.OpenMPI4, "mpirun -np 8 --mca rmaps_base_mapping_policy node ./a", wired, nil}, // the same as a parameter
		{mpi.OpenMPI4, "mpirun -np 8 ./a", append(slices.Clone(wired), "OMPI_MCA_rmaps_base_mapping_policy=node"), nil},
		{mpi.OpenMPI4, "mpirun -np 8 --rankfile /r ./a", wired, nil},                                // a rankfile
		{mpi.OpenMPI4, "mpirun -np 8 -H a,b ./a", wired, nil},                                       // hosts of its own
		{mpi.OpenMPI4, "mpirun -np 8 --hostfile /etc/mpi/hostfile ./a", wired, nil},                 // another hostfile
		{mpi.OpenMPI4, "mpirun -np 8 ./a", []string{"OMPI_MCA_orte_default_hostfile=/theirs"}, nil}, // a hostfile the user kept
		{mpi.OpenMPI4, "mpirun -np 8 ./a", nil, nil},                                                // no hostfile: all on the launcher's pod
		{mpi.OpenMPI4, "mpirun -np 8 --some-new-flag ./a", wired, nil},                              // an option it does not know
		{mpi.OpenMPI4, "mpirun -np 4 ./a : -np 4 ./b", wired, nil},                                  // app contexts
		{mpi.OpenMPI4, "bash -c mpirun", wired, nil},                                                // not mpirun itself
		{mpi.MPICH, "mpiexec -n 8 ./a", []string{"HYDRA_HOST_FILE=" + hf}, nil},                     // Hydra names its hosts
	} {
		got := RankHosts(tc.impl, strings.Fields(tc.cmd), tc.env, hf, hosts)
		if !slices.Equal(got, tc.want) {
			t.Errorf("RankHosts(%s, %q, %q) = %q, want %q", tc.impl, tc.cmd, tc.env, got, tc.want)
		}
	}
}

// FuzzRankHosts: any command and environment; the placement is unknown,
// or one hostfile host per rank, in the hostfile's order.
func FuzzRankHosts(f *testing.F) {
	f.Add("mpirun -np 3 --mca btl tcp ./a", "OMPI_MCA_orte_default_hostfile=/h")
	f.Add("mpirun -np=2 --hostfile /h ./a : x", "OMPI_MCA_rmaps_base_mapping_policy=node")
	hosts := []hostfile.Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}
	f.Fuzz(func(t *testing.T, cmd, env string) {
		got := RankHosts(mpi.OpenMPI4, strings.Fields(cmd), strings.Split(env, "\n"), "/h", hosts)
		if got == nil {
			return
		}
		want := []string{"a", "a", "b"}
		if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("RankHosts(%q, %q) = %q", cmd, env, got)
		}
	})
}
