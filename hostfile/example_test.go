package hostfile_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/podmpi/podmpi/hostfile"
)

func ExampleRender() {
	hosts := []hostfile.Host{
		{Name: "tj-node-0-0.tj", Slots: 2},
		{Name: "tj-node-0-1.tj", Slots: 2},
		{Name: "tj-launcher-0-0.tj", Slots: 2},
	}
	for _, f := range []hostfile.Format{hostfile.OpenMPI, hostfile.MPICH} {
		if err := hostfile.Render(os.Stdout, f, hosts); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// tj-node-0-0.tj slots=2
	// tj-node-0-1.tj slots=2
	// tj-launcher-0-0.tj slots=2
	// tj-node-0-0.tj:2
	// tj-node-0-1.tj:2
	// tj-launcher-0-0.tj:2
}

func ExampleParse() {
	const in = `# written by mpi-operator (Intel MPI), edited by hand
pi-worker-0.pi.default.svc:4
pi-worker-1.pi.default.svc     # no count: Hydra uses 1
`
	hosts, format, err := hostfile.Parse(strings.NewReader(in))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("format:", format)
	for _, h := range hostfile.WithDefaultSlots(hosts, 1) {
		fmt.Printf("%s has %d slots\n", h.Name, h.Slots)
	}
	fmt.Println("total:", hostfile.TotalSlots(hostfile.WithDefaultSlots(hosts, 1)))

	_, _, err = hostfile.Parse(strings.NewReader("tj-node-0-0.tj slots=2\ntj_node-0-1.tj slots=2\n"))
	fmt.Println(err)
	// Output:
	// format: MPICH
	// pi-worker-0.pi.default.svc has 4 slots
	// pi-worker-1.pi.default.svc has 1 slots
	// total: 5
	// hostfile line 2: "tj_node-0-1.tj slots=2": invalid host name "tj_node-0-1.tj": '_' at offset 2: underscores are not allowed in RFC 1123 host names (nor in Kubernetes pod or Service names); use '-'
}
