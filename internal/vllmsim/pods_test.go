package vllmsim

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func pod(name, ip string, phase corev1.PodPhase, deleting bool, podLabels map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: podLabels},
		Status:     corev1.PodStatus{Phase: phase, PodIP: ip},
	}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: t0}
	}
	return p
}

func TestPodAddresses(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want []string
	}{
		{"none", nil, nil},
		{"running pods sorted", []*corev1.Pod{
			pod("b", "127.1.0.9", corev1.PodRunning, false, nil),
			pod("a", "127.1.0.7", corev1.PodRunning, false, nil),
		}, []string{"127.1.0.7:8000", "127.1.0.9:8000"}},
		{"pending, deleting, without IP and failed are skipped", []*corev1.Pod{
			pod("a", "127.1.0.1", corev1.PodPending, false, nil),
			pod("b", "127.1.0.2", corev1.PodRunning, true, nil),
			pod("c", "", corev1.PodRunning, false, nil),
			pod("d", "127.1.0.4", corev1.PodFailed, false, nil),
			pod("e", "127.1.0.5", corev1.PodRunning, false, nil),
		}, []string{"127.1.0.5:8000"}},
		{"IPv6", []*corev1.Pod{pod("a", "fd00::1", corev1.PodRunning, false, nil)}, []string{"[fd00::1]:8000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodAddresses(tc.pods, 8000); !slices.Equal(got, tc.want) {
				t.Errorf("PodAddresses = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWatchPods(t *testing.T) {
	vllm := map[string]string{"app": "vllm"}
	client := fake.NewClientset(
		pod("a", "127.1.0.1", corev1.PodRunning, false, vllm),
		pod("other", "127.1.0.2", corev1.PodRunning, false, map[string]string{"app": "web"}),
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes := make(chan []string, 16)
	done := make(chan error, 1)
	go func() {
		done <- WatchPods(ctx, client, "ns", "app=vllm", 8000, func(addrs []string) { changes <- addrs })
	}()
	next := func(want ...string) {
		t.Helper()
		select {
		case got := <-changes:
			if !slices.Equal(got, want) {
				t.Fatalf("addresses %v, want %v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no change reported, want %v", want)
		}
	}
	next("127.1.0.1:8000")

	pods := client.CoreV1().Pods("ns")
	if _, err := pods.Create(ctx, pod("b", "127.1.0.3", corev1.PodRunning, false, vllm), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next("127.1.0.1:8000", "127.1.0.3:8000")

	terminating := pod("a", "127.1.0.1", corev1.PodRunning, true, vllm)
	if _, err := pods.Update(ctx, terminating, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next("127.1.0.3:8000")

	if err := pods.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next()

	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchPods: %v", err)
	}
}

func TestWatchPodsRejectsBadSelector(t *testing.T) {
	err := WatchPods(context.Background(), fake.NewClientset(), "", "app in (", 8000, func([]string) {})
	if err == nil {
		t.Error("WatchPods accepted a malformed selector")
	}
}
