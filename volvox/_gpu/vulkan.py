"""Vulkan backend through the ``vulkan`` PyPI package (cffi; loads libvulkan at run time).

Buffers live in host-visible, host-coherent memory, mapped once: uploads and downloads are
memcpys (on a discrete GPU this trades bandwidth for simplicity; lavapipe and integrated GPUs
have only such memory anyway). A graph becomes one command buffer: per dispatch a descriptor
set, the dispatch, and a compute->compute memory barrier; one vkQueueSubmit and one fence wait.

The package's struct constructors drop falsy keyword arguments, so zero/False fields are
simply left at their zero defaults, never passed.
"""

from __future__ import annotations

import numpy as np

from .backend import SHADER_DIR, BackendUnavailable, Buffer, Device, Record, Readback, kernel_info

try:
    import vulkan as vk
except Exception as e:  # the package, or its cffi library, is missing
    raise BackendUnavailable(f"python package 'vulkan' unavailable: {e}") from None


class VulkanDevice(Device):
    """The first Vulkan physical device with a compute queue (a hardware one preferred)."""

    name = "vulkan"

    def __init__(self):
        super().__init__()
        try:
            app = vk.VkApplicationInfo(sType=vk.VK_STRUCTURE_TYPE_APPLICATION_INFO, pApplicationName="volvox",
                                       apiVersion=vk.VK_MAKE_VERSION(1, 1, 0))
            self.instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(
                sType=vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, pApplicationInfo=app), None)
            physical = vk.vkEnumeratePhysicalDevices(self.instance)
        except Exception as e:  # no loader, no ICD
            raise BackendUnavailable(f"no Vulkan driver ({type(e).__name__}: {e})") from None
        candidates = []
        for pd in physical:
            props = vk.vkGetPhysicalDeviceProperties(pd)
            queues = vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)
            family = next((i for i, q in enumerate(queues) if q.queueFlags & vk.VK_QUEUE_COMPUTE_BIT), None)
            if family is not None:
                software = props.deviceType == vk.VK_PHYSICAL_DEVICE_TYPE_CPU
                candidates.append((software, pd, props, family))
        if not candidates:
            raise BackendUnavailable("no Vulkan device with a compute queue")
        self.software, self.physical, props, self.family = sorted(candidates, key=lambda c: c[0])[0]
        self.description = props.deviceName
        queue_info = vk.VkDeviceQueueCreateInfo(sType=vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                                queueFamilyIndex=self.family, queueCount=1, pQueuePriorities=[1.0])
        self.device = vk.vkCreateDevice(self.physical, vk.VkDeviceCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, queueCreateInfoCount=1, pQueueCreateInfos=[queue_info]), None)
        self.queue = vk.vkGetDeviceQueue(self.device, self.family, 0)
        self.memory_type = self._host_visible_type()
        self.cmd_pool = vk.vkCreateCommandPool(self.device, vk.VkCommandPoolCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, queueFamilyIndex=self.family,
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT), None)
        self.cmd = vk.vkAllocateCommandBuffers(self.device, vk.VkCommandBufferAllocateInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, commandPool=self.cmd_pool,
            level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        self.fence = vk.vkCreateFence(self.device, vk.VkFenceCreateInfo(sType=vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO), None)
        self.pipelines: dict[str, tuple] = {}  # kernel -> (pipeline, layout, set layout, shader module)
        self.buffers: list[Buffer] = []
        self.param_buf: Buffer | None = None

    def _host_visible_type(self) -> int:
        want = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        mem = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        for i in range(mem.memoryTypeCount):
            if mem.memoryTypes[i].propertyFlags & want == want:
                return i
        raise BackendUnavailable("Vulkan device has no host-visible coherent memory")

    def _alloc(self, nbytes: int) -> Buffer:
        usage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        buf = vk.vkCreateBuffer(self.device, vk.VkBufferCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, size=nbytes, usage=usage,
            sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        req = vk.vkGetBufferMemoryRequirements(self.device, buf)
        if not req.memoryTypeBits & (1 << self.memory_type):
            raise BackendUnavailable("Vulkan storage buffers cannot live in host-visible memory on this device")
        memory = vk.vkAllocateMemory(self.device, vk.VkMemoryAllocateInfo(
            sType=vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, allocationSize=req.size, memoryTypeIndex=self.memory_type), None)
        vk.vkBindBufferMemory(self.device, buf, memory, 0)
        mapped = np.frombuffer(vk.vkMapMemory(self.device, memory, 0, nbytes, 0), dtype=np.uint8)  # (nbytes,) view
        b = Buffer(buf, nbytes, (memory, mapped))
        self.buffers.append(b)
        return b

    def _write(self, buf: Buffer, data) -> None:
        buf.extra[1][:len(data)] = np.frombuffer(data, dtype=np.uint8)

    def supports(self, kernel: str) -> bool:
        """Every kernel fits Vulkan's guaranteed limits; true once its pipeline builds."""
        try:
            self._pipeline(kernel)
            return True
        except Exception:
            return False

    def _pipeline(self, kernel: str) -> tuple:
        if kernel in self.pipelines:
            return self.pipelines[kernel]
        code = (SHADER_DIR / "spv" / f"{kernel}.spv").read_bytes()
        module = vk.vkCreateShaderModule(self.device, vk.VkShaderModuleCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, codeSize=len(code), pCode=code), None)
        n = kernel_info(kernel).n_buffers + 1
        bindings = [vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                    descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
                    for i in range(n)]
        set_layout = vk.vkCreateDescriptorSetLayout(self.device, vk.VkDescriptorSetLayoutCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, bindingCount=n, pBindings=bindings), None)
        layout = vk.vkCreatePipelineLayout(self.device, vk.VkPipelineLayoutCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, setLayoutCount=1, pSetLayouts=[set_layout]), None)
        stage = vk.VkPipelineShaderStageCreateInfo(sType=vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                                   stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module, pName="main")
        pipeline = vk.vkCreateComputePipelines(self.device, None, 1, [vk.VkComputePipelineCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, stage=stage, layout=layout)], None)[0]
        self.pipelines[kernel] = (pipeline, layout, set_layout, module)
        return self.pipelines[kernel]

    def _params_buffer(self, params: bytes) -> Buffer:
        if self.param_buf is None or self.param_buf.nbytes < len(params):
            self.param_buf = self._alloc(max(len(params), 4096) * 2)
        self._write(self.param_buf, params)
        return self.param_buf

    def _run(self, records: list[Record], params: bytes, offsets: list[int], reads: list[Readback]) -> None:
        pbuf = self._params_buffer(params) if records else None
        pool = None
        if records:
            n_desc = sum(len(r.buffers) + 1 for r in records)
            pool = vk.vkCreateDescriptorPool(self.device, vk.VkDescriptorPoolCreateInfo(
                sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, maxSets=len(records), poolSizeCount=1,
                pPoolSizes=[vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=n_desc)]), None)
        vk.vkResetCommandBuffer(self.cmd, 0)
        vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        barrier = vk.VkMemoryBarrier(sType=vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                     srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT,
                                     dstAccessMask=vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT)
        for rec, off in zip(records, offsets):
            pipeline, layout, set_layout, _ = self._pipeline(rec.kernel)
            dset = vk.vkAllocateDescriptorSets(self.device, vk.VkDescriptorSetAllocateInfo(
                sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, descriptorPool=pool,
                descriptorSetCount=1, pSetLayouts=[set_layout]))[0]
            infos = [vk.VkDescriptorBufferInfo(buffer=b.native, offset=0, range=b.nbytes) for b in rec.buffers]
            infos.append(vk.VkDescriptorBufferInfo(buffer=pbuf.native, offset=off, range=len(rec.params)))
            writes = [vk.VkWriteDescriptorSet(sType=vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, dstSet=dset,
                                              dstBinding=i, descriptorCount=1,
                                              descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, pBufferInfo=[info])
                      for i, info in enumerate(infos)]
            vk.vkUpdateDescriptorSets(self.device, len(writes), writes, 0, None)
            vk.vkCmdBindPipeline(self.cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
            vk.vkCmdBindDescriptorSets(self.cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, [dset], 0, None)
            vk.vkCmdDispatch(self.cmd, *rec.grid)
            vk.vkCmdPipelineBarrier(self.cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                    vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_HOST_BIT,
                                    0, 1, [barrier], 0, None, 0, None)
        vk.vkEndCommandBuffer(self.cmd)
        vk.vkQueueSubmit(self.queue, 1, [vk.VkSubmitInfo(sType=vk.VK_STRUCTURE_TYPE_SUBMIT_INFO,
                                                         commandBufferCount=1, pCommandBuffers=[self.cmd])], self.fence)
        self.submits += 1
        vk.vkWaitForFences(self.device, 1, [self.fence], vk.VK_TRUE, 0xFFFFFFFFFFFFFFFF)
        vk.vkResetFences(self.device, 1, [self.fence])
        if pool is not None:
            vk.vkDestroyDescriptorPool(self.device, pool, None)
        for r in reads:  # host-coherent memory: the fence made the writes visible
            r.data = r.buffer.extra[1][:r.nbytes].copy()

    def close(self) -> None:
        """Destroy every Vulkan object this device made."""
        if getattr(self, "device", None) is None:
            return
        vk.vkDeviceWaitIdle(self.device)
        for pipeline, layout, set_layout, module in self.pipelines.values():
            vk.vkDestroyPipeline(self.device, pipeline, None)
            vk.vkDestroyPipelineLayout(self.device, layout, None)
            vk.vkDestroyDescriptorSetLayout(self.device, set_layout, None)
            vk.vkDestroyShaderModule(self.device, module, None)
        for b in self.buffers:
            vk.vkDestroyBuffer(self.device, b.native, None)
            vk.vkFreeMemory(self.device, b.extra[0], None)
        vk.vkDestroyFence(self.device, self.fence, None)
        vk.vkDestroyCommandPool(self.device, self.cmd_pool, None)
        vk.vkDestroyDevice(self.device, None)
        vk.vkDestroyInstance(self.instance, None)
        self.device = None
