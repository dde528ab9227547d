"""OneFlow's nn.Graph tutorial, part 1: train MobileNetV2 on CIFAR-10 in Eager mode, on toynet.

The program is the tutorial's with the imports changed (``import toynet as flow`` and friends). Lines
marked ``# toynet:`` are additions that let a test or a quick look run it small; with no options it
behaves as the tutorial: batch 64, one epoch over the 50,000 training images in ``data/``.

    python examples/mobilenet_eager.py                       # the tutorial (a few minutes on a CPU)
    python examples/mobilenet_eager.py --max-batches 10      # a taste: 10 batches

Without the real data set (``data/cifar-10-python.tar.gz``: ``flowvision.datasets.CIFAR10("data",
download=True)`` fetches it, 163 MB), a small synthetic stand-in with the same file format is written to
``data/toynet-fake-cifar10/`` and used instead: the program itself downloads nothing.

Options also come from environment variables: TOYNET_DATA_ROOT, TOYNET_BATCH_SIZE, TOYNET_EPOCHS,
TOYNET_MAX_BATCHES, TOYNET_FAKE_SIZE.

Note the tutorial's typo ``model.classifer = ...``: it adds a new, unused head instead of replacing
``model.classifier``, so the model still predicts 1000 classes and the first loss is near
ln(1000) = 6.91. Kept, so the printed numbers can be compared with the tutorial's.
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
    parser.add_argument("--seed", type=int, default=None, help="toynet.manual_seed, for repeatable runs")
    return parser.parse_args(argv)


def progress_bar(total, epoch):  # toynet: a tqdm bar on stderr, shown only when stderr is a terminal
    return tqdm(total=total, desc=f"epoch {epoch}", unit="batch", file=sys.stderr, disable=None, leave=False)


args = parse_args()  # toynet
if args.seed is not None:  # toynet
    flow.manual_seed(args.seed)

BATCH_SIZE = args.batch_size  # the tutorial: 64
EPOCH_NUM = args.epochs  # the tutorial: 1

DEVICE = "cuda" if flow.cuda.is_available() else "cpu"
print("Using {} device".format(DEVICE))

training_data = flowvision.datasets.CIFAR10(
    root=find_or_make_cifar10(args.root, n_train=args.fake_size),  # the tutorial: root="data"
    train=True,
    transform=transforms.ToTensor(),
    download=True,
    source_url="https://oneflow-public.oss-cn-beijing.aliyuncs.com/datasets/cifar/cifar-10-python.tar.gz",
)

train_dataloader = flow.utils.data.DataLoader(
    training_data, BATCH_SIZE, shuffle=True
)

model = flowvision.models.mobilenet_v2().to(DEVICE)
model.classifer = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.last_channel, 10))
model.train()

loss_fn = nn.CrossEntropyLoss().to(DEVICE)
optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)


for t in range(EPOCH_NUM):
    print(f"Epoch {t+1}\n-------------------------------")
    size = len(train_dataloader.dataset)
    progress = progress_bar(args.max_batches or len(train_dataloader), t + 1)  # toynet
    tutorial_stdout, sys.stdout = sys.stdout, DummyTqdmFile(sys.stdout)  # toynet: whole lines above the bar
    for batch, (x, y) in enumerate(train_dataloader):
        x = x.to(DEVICE)
        y = y.to(DEVICE)

        # Compute prediction error
        pred = model(x)
        loss = loss_fn(pred, y)

        # Backpropagation
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        current = batch * BATCH_SIZE
        if batch % 5 == 0:
            print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")
        progress.update()  # toynet
        if batch + 1 == args.max_batches:  # toynet
            break
    sys.stdout = tutorial_stdout  # toynet
    progress.close()  # toynet
