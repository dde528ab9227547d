"""Fashion-MNIST with toynet, the way OneFlow's first tutorial pages work with it: a data set read from its
IDX files, a DataLoader, a small fully connected network, a training loop and an evaluation loop.

    python examples/fashion_mnist.py                  # 5 epochs
    python examples/fashion_mnist.py --epochs 1       # a taste

The program downloads nothing, so it runs offline. With the real files in ``data/FashionMNIST/raw/``
(``train-images-idx3-ubyte.gz`` and the three others; ``datasets.FashionMNIST("data", download=True)`` fetches
them, about 30 MB) they are used; without them a small synthetic stand-in in the same format is written to
``data/fake-fashionmnist/`` and used instead (toynet.vision.mnist_fake), so the program always runs.
"""

import argparse

import toynet as flow
import toynet.nn as nn
from toynet.vision import datasets, transforms
from toynet.vision.mnist_fake import find_or_make_mnist


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default="data", help="the folder holding FashionMNIST/raw/")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--fake-size", type=int, default=1280, help="training images of the stand-in")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def evaluate(loader, model, loss_fn):
    """Mean loss over the batches and the fraction of images classified right."""
    model.eval()
    total_loss, correct = 0.0, 0
    with flow.no_grad():
        for images, labels in loader:
            scores = model(images)
            total_loss += loss_fn(scores, labels).item()
            correct += int((scores.argmax(1) == labels).sum().item())
    model.train()
    return total_loss / len(loader), correct / len(loader.dataset)


def main(argv=None):
    args = parse_args(argv)
    flow.manual_seed(args.seed)
    root = find_or_make_mnist(args.root, "FashionMNIST", n_train=args.fake_size, n_test=args.fake_size // 5)
    train_set = datasets.FashionMNIST(root, train=True, transform=transforms.ToTensor(), download=True)
    test_set = datasets.FashionMNIST(root, train=False, transform=transforms.ToTensor(), download=True)
    stand_in = root != args.root   # find_or_make_mnist wrote a synthetic stand-in: its accuracy means less
    print(f"{len(train_set)} training and {len(test_set)} test images from {root}"
          + (" (a synthetic stand-in, not Fashion-MNIST)" if stand_in else ""))
    train_loader = flow.utils.data.DataLoader(train_set, args.batch_size, shuffle=True)
    test_loader = flow.utils.data.DataLoader(test_set, args.batch_size, shuffle=False)
    images, labels = next(iter(train_loader))
    print("one batch:", images.shape, labels.shape)

    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 10))
    loss_fn = nn.CrossEntropyLoss()
    optimizer = flow.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        for images, labels in train_loader:
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        test_loss, accuracy = evaluate(test_loader, model, loss_fn)
        print(f"epoch {epoch}: last training loss {loss:>7f}, test loss {test_loss:>7f}, "
              f"accuracy {100 * accuracy:>5.1f}%" + (" on the stand-in's test images" if stand_in else ""))
    return accuracy


if __name__ == "__main__":
    main()
