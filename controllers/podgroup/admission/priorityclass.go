package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// SeatPriority is the priority of seat pods: below every workload (the default is 0), so any
// pod that needs a seat's capacity preempts it, and a seat never preempts anything.
const SeatPriority int32 = -1000

// SeatPriorityClass is the PriorityClass seat pods use. The Helm chart and config/ ship it too;
// the controller creates it when it is missing.
func SeatPriorityClass() *schedulingv1.PriorityClass {
	never := corev1.PreemptNever
	return &schedulingv1.PriorityClass{
		TypeMeta: metav1.TypeMeta{APIVersion: schedulingv1.SchemeGroupVersion.String(), Kind: "PriorityClass"},
		ObjectMeta: metav1.ObjectMeta{Name: berthv1alpha1.SeatPriorityClassName,
			Labels: map[string]string{berthv1alpha1.ManagedByLabel: berthv1alpha1.ManagedByBerth}},
		Value:            SeatPriority,
		PreemptionPolicy: &never,
		Description:      "Seat pods of berth: hold Karpenter capacity for a gang until it is admitted whole. Lowest priority, never preempt.",
		GlobalDefault:    false,
	}
}

// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get;create

// SeatPriorityClassInstaller is a manager runnable that creates the seat PriorityClass if it
// does not exist. It runs on every replica (creation is idempotent), before leader election.
func SeatPriorityClassInstaller(c client.Client) manager.Runnable {
	return seatPCInstaller{c: c}
}

type seatPCInstaller struct{ c client.Client }

// NeedLeaderElection: every replica may ensure the class.
func (seatPCInstaller) NeedLeaderElection() bool { return false }

// Start creates the class once.
func (i seatPCInstaller) Start(ctx context.Context) error {
	pc := SeatPriorityClass()
	if err := i.c.Create(ctx, pc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating PriorityClass %s: %w", pc.Name, err)
	}
	return nil
}
