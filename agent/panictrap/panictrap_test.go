package panictrap

import (
	"strings"
	"sync"
	"testing"
)

func TestRethrowCarriesTheFirstPanic(t *testing.T) {
	var trap Trap
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer trap.Capture("a test goroutine")
			if i%2 == 0 {
				panic("boom")
			}
		}()
	}
	wg.Wait()
	defer func() {
		r := recover()
		s, ok := r.(string)
		if !ok || !strings.HasPrefix(s, "boom [in a test goroutine]\n") || !strings.Contains(s, "panictrap_test.go") {
			t.Fatalf("recovered %v, want boom with where and the goroutine's stack", r)
		}
	}()
	trap.Rethrow()
	t.Fatal("Rethrow returned after a panic")
}

func TestRethrowWithoutPanic(t *testing.T) {
	var trap Trap
	func() { defer trap.Capture("nothing") }()
	trap.Rethrow()
}
