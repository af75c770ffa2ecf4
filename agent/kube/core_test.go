package kube

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// apiRequest is what the fake API server saw.
type apiRequest struct {
	method, path, query, contentType, body string
}

// fakeAPIServer answers core/v1 requests as the API server does, with the
// JSON given per method and path, and records each request.
func fakeAPIServer(t *testing.T, answers map[string]any) (*rest.Config, func() []apiRequest) {
	t.Helper()
	var mu sync.Mutex
	var seen []apiRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, apiRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), string(b)})
		mu.Unlock()
		a, ok := answers[r.Method+" "+r.URL.Path]
		if !ok {
			t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			w.WriteHeader(http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if st, ok := a.(*metav1.Status); ok {
			w.WriteHeader(int(st.Code))
		}
		_ = json.NewEncoder(w).Encode(a)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}, func() []apiRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]apiRequest(nil), seen...)
	}
}

// TestRESTCore: the launcher's core/v1 client makes the requests the typed
// clientset makes (paths, selectors, bodies, the patch type) and reads the
// answers, API errors included.
func TestRESTCore(t *testing.T) {
	ev := &corev1.Event{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "tj.1", Namespace: "ns"}, Reason: "ProbeFailed", Count: 2}
	cfg, seen := fakeAPIServer(t, map[string]any{
		"GET /api/v1/namespaces/ns/pods/p1": &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "p1", UID: "u1"}},
		"GET /api/v1/namespaces/ns/pods": &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
			Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}},
		"GET /api/v1/namespaces/ns/events": &corev1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "v1"},
			Items: []corev1.Event{{Reason: "Killing"}}},
		"POST /api/v1/namespaces/ns/events":       ev,
		"PATCH /api/v1/namespaces/ns/events/tj.1": ev,
		"GET /api/v1/namespaces/ns/pods/denied": &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden, Message: "pods is forbidden"},
		"PATCH /api/v1/namespaces/ns/events/gone": &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound},
	})
	core, err := newRESTCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if p, err := core.GetPod(ctx, "ns", "p1"); err != nil || p.Name != "p1" || p.UID != "u1" {
		t.Fatalf("GetPod = %+v, %v", p, err)
	}
	if l, err := core.ListPods(ctx, "ns", metav1.ListOptions{LabelSelector: "jobset.sigs.k8s.io/jobset-name=tj"}); err != nil || len(l.Items) != 2 {
		t.Fatalf("ListPods = %+v, %v", l, err)
	}
	if l, err := core.ListEvents(ctx, "ns", metav1.ListOptions{FieldSelector: "involvedObject.name=p1"}); err != nil || l.Items[0].Reason != "Killing" {
		t.Fatalf("ListEvents = %+v, %v", l, err)
	}
	if e, err := core.CreateEvent(ctx, "ns", ev); err != nil || e.Name != "tj.1" {
		t.Fatalf("CreateEvent = %+v, %v", e, err)
	}
	if e, err := core.PatchEvent(ctx, "ns", "tj.1", []byte(`{"count":2}`)); err != nil || e.Count != 2 {
		t.Fatalf("PatchEvent = %+v, %v", e, err)
	}
	if _, err := core.GetPod(ctx, "ns", "denied"); !apierrors.IsForbidden(err) {
		t.Fatalf("a 403 reads as %v, want forbidden", err)
	}
	if _, err := core.PatchEvent(ctx, "ns", "gone", []byte(`{}`)); !apierrors.IsNotFound(err) {
		t.Fatalf("a 404 reads as %v, want not found", err)
	}
	got := seen()
	want := []apiRequest{
		{method: "GET", path: "/api/v1/namespaces/ns/pods/p1"},
		{method: "GET", path: "/api/v1/namespaces/ns/pods", query: "labelSelector=jobset.sigs.k8s.io%2Fjobset-name%3Dtj"},
		{method: "GET", path: "/api/v1/namespaces/ns/events", query: "fieldSelector=involvedObject.name%3Dp1"},
		{method: "POST", path: "/api/v1/namespaces/ns/events", contentType: "application/json"},
		{method: "PATCH", path: "/api/v1/namespaces/ns/events/tj.1", contentType: "application/strategic-merge-patch+json", body: `{"count":2}`},
	}
	for i, w := range want {
		g := got[i]
		if g.method != w.method || g.path != w.path || g.query != w.query || (w.contentType != "" && g.contentType != w.contentType) ||
			(w.body != "" && g.body != w.body) {
			t.Errorf("request %d: %+v, want %+v", i, g, w)
		}
	}
	var posted corev1.Event
	if err := json.Unmarshal([]byte(got[3].body), &posted); err != nil || posted.Reason != "ProbeFailed" || posted.Name != "tj.1" {
		t.Errorf("the created Event's body %q: %v", got[3].body, err)
	}
}
