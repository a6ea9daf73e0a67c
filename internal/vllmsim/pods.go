package vllmsim

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// PodAddresses returns "podIP:port" for every pod that is Running, not being deleted and has
// an IP, sorted and without duplicates: the addresses a vLLM Deployment's pods would serve on.
func PodAddresses(pods []*corev1.Pod, port int) []string {
	var out []string
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		out = append(out, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// WatchPods follows the pods of namespace (all namespaces when empty) that match the label
// selector and calls onChange with their PodAddresses once the pods are listed and again
// whenever that list changes, until ctx is done. onChange runs on one goroutine at a time.
func WatchPods(ctx context.Context, client kubernetes.Interface, namespace, selector string, port int, onChange func(addrs []string)) error {
	sel, err := labels.Parse(selector)
	if err != nil {
		return fmt.Errorf("parsing pod selector %q: %w", selector, err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }))
	pods := factory.Core().V1().Pods()
	informer := pods.Informer()
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return fmt.Errorf("watching pods %q: %w", selector, err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("listing pods %q: %w", selector, context.Cause(ctx))
	}
	notify()
	var last []string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		list, err := pods.Lister().List(sel)
		if err != nil {
			return fmt.Errorf("listing pods %q from the cache: %w", selector, err)
		}
		addrs := PodAddresses(list, port)
		if last == nil || !slices.Equal(addrs, last) {
			onChange(addrs)
			last = append([]string{}, addrs...)
		}
	}
}
