// Plain SGD.
#include "autograd/optim.h"

#include "autograd/backend.h"
#include "autograd/context.h"
#include "autograd/tensor.h"

namespace shardscope {

void sgd_step(const std::vector<Tensor>& parameters, double learning_rate) {
  for (const Tensor& p : parameters) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    NoGradGuard no_grad(p.ctx());
    Tensor target = p;  // updates the parameter's storage in place
    p.ctx().backend().add(p, g, 1.0, -learning_rate, target);
    if (p.ctx().check_finite()) {
      check_finite(p, p.ctx().where("sgd_step"), "the parameter after the update",
                   "its gradient was finite (the backward checked it): the learning rate times "
                   "the gradient overflowed");
    }
    target.zero_grad();
  }
}

}  // namespace shardscope
