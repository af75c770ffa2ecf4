package api

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/podmpi/podmpi/gpu"
)

// TestDecodeInfo reads a document with a key this version does not know,
// and tells "not decided yet" (ask again) from a final failure.
func TestDecodeInfo(t *testing.T) {
	t.Parallel()
	body := `{"hostname":"tj-node-0-1","slots":{"n":2,"source":"gpu","reason":""},"gpus":{"count":8,"source":"nvml","reason":"","devices":[{"uuid":"GPU-1"}]},"version":{"version":"v1"},"futureField":[1,2]}`
	info, err := DecodeInfo(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want := Info{Hostname: "tj-node-0-1", Slots: Slots{N: 2, Source: "gpu"}, GPUs: GPUs{Count: 8, Source: "nvml"}}
	want.GPUs.Devices = []gpu.Device{{UUID: "GPU-1"}}
	want.Version.Version = "v1"
	if !reflect.DeepEqual(info, want) {
		t.Errorf("%+v", info)
	}
	for body, notDecided := range map[string]bool{
		`{"slots":{"n":0}}`: true,
		`{"slots":{"n":0,"source":"","reason":"gpu detection in progress"}}`: true,
		`{"slots":{"n":0,"source":"","reason":"nvml: init failed"}}`:         false,
		`{"slots":{"n":0,"source":"gpu"}}`:                                   false,
	} {
		_, err := DecodeInfo(strings.NewReader(body))
		if err == nil || errors.Is(err, ErrNotDecided) != notDecided {
			t.Errorf("DecodeInfo(%s) = %v, want not-decided %v", body, err, notDecided)
		}
	}
}
