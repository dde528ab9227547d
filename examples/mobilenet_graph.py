"""OneFlow's nn.Graph tutorial, part 2: the same MobileNetV2 training in Graph mode, on toynet.

The training program is the tutorial's with the imports changed; then come the tutorial's other
Graph-mode snippets, in an order that runs as one program:

1. train with ``GraphMobileNetV2`` (``print(graph)`` before and after its first call shows the tagged
   outline: GRAPH, CONFIG, MODULE, PARAMETER, BUFFER, INPUT, OUTPUT), saving ``graph.state_dict()``
   after each epoch to ``./GraphMobileNetV2``;
2. restore that checkpoint into a fresh model, optimizer and graph with ``load_state_dict``, and check
   that it continues exactly where the first graph is;
3. inference in Graph mode (the tutorial's inference ``GraphMobileNetV2``, renamed
   ``GraphMobileNetV2Inference`` so both classes fit in one file), compared with Eager mode;
4. export for deployment with ``flow.save(graph, "./mobile_net_v2_model")``, load it back without the
   model's code, and run it.

Lines marked ``# toynet:`` are additions; with no options the training part behaves as the tutorial
(batch 64, one epoch over ``data/``). Options (and environment variables) as in mobilenet_eager.py,
plus ``--out`` (TOYNET_OUT), the folder for the checkpoint and the exported model (default ``.``), and
``--no-print-graph`` to skip the two long ``print(graph)`` outlines.

    python examples/mobilenet_graph.py --max-batches 10
"""
# The tutorial's own spelling is kept (module aliases, str.format) so it diffs cleanly with the original:
# ruff: noqa: PLR0402, UP032

import argparse  # toynet
import os  # toynet
import sys  # toynet

from tqdm import tqdm  # toynet: a progress bar for the long loop
from tqdm.contrib import DummyTqdmFile  # toynet: printed lines go above the bar

import toynet as flow
import toynet.nn as nn
import toynet.vision as flowvision
import toynet.vision.transforms as transforms
from toynet.vision.fake_cifar import find_or_make_cifar10  # toynet: a stand-in when CIFAR-10 is absent


def parse_args(argv=None):  # toynet: options to run the tutorial small
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=env("TOYNET_DATA_ROOT", "data"), help="folder holding CIFAR-10")
    parser.add_argument("--batch-size", type=int, default=int(env("TOYNET_BATCH_SIZE", 64)))
    parser.add_argument("--epochs", type=int, default=int(env("TOYNET_EPOCHS", 1)))
    parser.add_argument("--max-batches", type=int, default=int(env("TOYNET_MAX_BATCHES", 0)),
                        help="stop each epoch after this many batches (0: the whole epoch)")
    parser.add_argument("--fake-size", type=int, default=int(env("TOYNET_FAKE_SIZE", 640)),
                        help="training images in the synthetic stand-in (used only without the real data)")
    parser.add_argument("--out", default=env("TOYNET_OUT", "."), help="where the checkpoint and model go")
    parser.add_argument("--no-print-graph", action="store_true", help="skip the two print(graph) outlines")
    parser.add_argument("--seed", type=int, default=None, help="toynet.manual_seed, for repeatable runs")
    return parser.parse_args(argv)


def progress_bar(total, epoch):  # toynet: a tqdm bar on stderr, shown only when stderr is a terminal
    return tqdm(total=total, desc=f"epoch {epoch}", unit="batch", file=sys.stderr, disable=None, leave=False)


args = parse_args()  # toynet
if args.seed is not None:  # toynet
    flow.manual_seed(args.seed)

# ------------------------------------------------------------------------ 1. training in Graph mode

BATCH_SIZE = args.batch_size  # the tutorial: 64
EPOCH_NUM = args.epochs  # the tutorial: 1

DEVICE = "cuda" if flow.cuda.is_available() else "cpu"
print("Using {} device".format(DEVICE))

training_data = flowvision.datasets.CIFAR10(
    root=find_or_make_cifar10(args.root, n_train=args.fake_size),  # the tutorial: root="data"
    train=True,
    transform=transforms.ToTensor(),
    download=True,
)

train_dataloader = flow.utils.data.DataLoader(
    training_data, BATCH_SIZE, shuffle=True, drop_last=True
)

model = flowvision.models.mobilenet_v2().to(DEVICE)
model.classifer = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.last_channel, 10))
model.train()

loss_fn = nn.CrossEntropyLoss().to(DEVICE)
optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)


class GraphMobileNetV2(flow.nn.Graph):
    def __init__(self):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(optimizer)

    def build(self, x, y):
        y_pred = self.model(x)
        loss = self.loss_fn(y_pred, y)
        loss.backward()
        return loss


graph_mobile_net_v2 = GraphMobileNetV2()
# graph_mobile_net_v2.debug()

CHECKPOINT_SAVE_DIR = os.path.join(args.out, "GraphMobileNetV2")  # the tutorial: "./GraphMobileNetV2"

if not args.no_print_graph:  # the tutorial's debugging section: the graph before its first call
    print(graph_mobile_net_v2)

for t in range(EPOCH_NUM):
    print(f"Epoch {t+1}\n-------------------------------")
    size = len(train_dataloader.dataset)
    progress = progress_bar(args.max_batches or len(train_dataloader), t + 1)  # toynet
    tutorial_stdout, sys.stdout = sys.stdout, DummyTqdmFile(sys.stdout)  # toynet: whole lines above the bar
    for batch, (x, y) in enumerate(train_dataloader):
        x = x.to(DEVICE)
        y = y.to(DEVICE)
        loss = graph_mobile_net_v2(x, y)
        current = batch * BATCH_SIZE
        if batch % 5 == 0:
            print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")
        if t == 0 and batch == 0 and not args.no_print_graph:
            print(graph_mobile_net_v2)  # ... and after it: now with INPUT and OUTPUT lines
        progress.update()  # toynet
        if batch + 1 == args.max_batches:  # toynet
            break
    sys.stdout = tutorial_stdout  # toynet
    progress.close()  # toynet

    # The tutorial's checkpointing: the whole training state, after each epoch.
    import shutil
    shutil.rmtree(CHECKPOINT_SAVE_DIR, ignore_errors=True)  # Clear previous state
    flow.save(graph_mobile_net_v2.state_dict(), CHECKPOINT_SAVE_DIR)

# ------------------------------------------------------- 2. resume from the checkpoint (load_state_dict)

print("\nRestoring the checkpoint into a fresh model, optimizer and graph")
model = flowvision.models.mobilenet_v2().to(DEVICE)  # new weights: the checkpoint must replace them
model.classifer = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.last_channel, 10))
model.train()
optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)
graph_resumed = GraphMobileNetV2()  # its __init__ picks up the new `model` and `optimizer`

state_dict = flow.load(CHECKPOINT_SAVE_DIR)
graph_resumed.load_state_dict(state_dict)

x, y = next(iter(train_dataloader))
x, y = x.to(DEVICE), y.to(DEVICE)
flow.manual_seed(1234)  # the same dropout masks for both graphs
loss_first = graph_mobile_net_v2(x, y)
flow.manual_seed(1234)
loss_resumed = graph_resumed(x, y)
print(f"next step, original graph: loss {loss_first.item():.6f}; resumed graph: loss {loss_resumed.item():.6f}; "
      f"train steps {int(state_dict['System-Train-TrainStep'].item())} -> "
      f"{int(graph_resumed.state_dict()['System-Train-TrainStep'].item())}")

# ------------------------------------------------------------------------ 3. inference in Graph mode

model.eval()  # BatchNorm uses its running statistics, Dropout passes everything through


class GraphMobileNetV2Inference(flow.nn.Graph):  # the tutorial's inference GraphMobileNetV2
    def __init__(self):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


graph_mobile_net_v2_inference = GraphMobileNetV2Inference()

x, _ = next(iter(train_dataloader))
x = x.to(DEVICE)
y_pred = graph_mobile_net_v2_inference(x)
with flow.no_grad():
    difference = (y_pred - model(x)).abs().max().item()
print(f"\ninference graph: predictions of shape {tuple(y_pred.shape)}, "
      f"largest difference from Eager mode {difference:.2e}")

# ------------------------------------------------------------------------ 4. export for deployment

MODEL_SAVE_DIR = os.path.join(args.out, "mobile_net_v2_model")  # the tutorial: "./mobile_net_v2_model"
if not os.path.exists(MODEL_SAVE_DIR):
    os.makedirs(MODEL_SAVE_DIR)
flow.save(graph_mobile_net_v2_inference, MODEL_SAVE_DIR)  # the tutorial exports graph_mobile_net_v2

deployed = flow.load(MODEL_SAVE_DIR)  # a graph rebuilt from the files alone: no MobileNetV2 code needed
difference = (deployed(x) - y_pred).abs().max().item()
print(f"exported to {MODEL_SAVE_DIR}; the reloaded graph's predictions differ by {difference:.2e}")
