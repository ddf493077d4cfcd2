# The CKS cluster Iris runs on, and the shared NodePools of examples/coreweave.yaml's scale groups.
# `iris cluster start` creates and reconciles the same pools itself; declaring them here lets an
# operator manage capacity limits with the rest of the infrastructure.
#
#   export COREWEAVE_API_TOKEN=...   # Console > Tokens > Create Token
#   terraform init && terraform apply
#   # then download the kubeconfig for the cluster and point KUBECONFIG at it

terraform {
  required_providers {
    coreweave = {
      source  = "coreweave/coreweave"
      version = ">= 0.3.0"
    }
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.30.0"
    }
  }
}

variable "cluster_name" {
  type    = string
  default = "iris-cluster"
}

variable "zone" {
  type    = string
  default = "US-WEST-04A"
}

variable "kubeconfig_path" {
  description = "Kubeconfig for the cluster (downloaded from the Console after the cluster exists)."
  type        = string
  default     = "~/.kube/coreweave-iris"
}

variable "label_prefix" {
  description = "platform.label_prefix of the Iris config; NodePools are named {label_prefix}-{scale group}."
  type        = string
  default     = "iris"
}

variable "scale_groups" {
  description = "Scale groups of the Iris config: instance type and the most nodes the pool may grow to."
  type = map(object({
    instance_type = string
    max_nodes     = number
  }))
  default = {
    "h100-8x" = {
      instance_type = "gd-8xh100ib-i128"
      max_nodes     = 10
    }
    "cpu-erapids" = {
      instance_type = "cd-gp-i64-erapids"
      max_nodes     = 4
    }
  }
}

provider "coreweave" {
  # Reads COREWEAVE_API_TOKEN.
}

provider "kubernetes" {
  config_path = pathexpand(var.kubeconfig_path)
}

resource "coreweave_cks_cluster" "iris" {
  name               = var.cluster_name
  kubernetes_version = "1.32"
  zone               = var.zone

  vpc = {
    name        = "${var.cluster_name}-vpc"
    host_prefix = "10.16.192.0/18"
    vpc_prefixes = {
      pod     = "10.17.0.0/16"
      service = "10.18.0.0/16"
      lb      = "10.19.0.0/16"
    }
  }
}

# One shared, autoscaling pool per scale group (seed 001): CoreWeave adds nodes while Pods wait for
# them and removes idle ones; Iris only creates Pods.
resource "kubernetes_manifest" "nodepool" {
  for_each   = var.scale_groups
  depends_on = [coreweave_cks_cluster.iris]

  manifest = {
    apiVersion = "compute.coreweave.com/v1alpha1"
    kind       = "NodePool"
    metadata = {
      name = "${var.label_prefix}-${each.key}"
      labels = {
        "${var.label_prefix}-managed"     = "true"
        "${var.label_prefix}-scale-group" = each.key
      }
    }
    spec = {
      instanceType = each.value.instance_type
      autoscaling  = true
      minNodes     = 0
      maxNodes     = each.value.max_nodes
      targetNodes  = 0
      nodeLabels = {
        "${var.label_prefix}-scale-group" = each.key
      }
    }
  }

  # targetNodes moves with autoscaling; Terraform must not pull it back.
  computed_fields = ["spec.targetNodes", "status"]
}
